//! Records Events about ConfigMaps labelled `herald=yes`, as many times per reconcile as its
//! configuration says: contract 0.2.0's `config` import, `validate-config` and `events` import,
//! through the SDK's `Controller::Config` and `Recorder`.

use kube_guest::events::{Event, EventType, Recorder};
use kube_guest::{info, Action, Api, Controller, Manifest, Result, Watch};

/// The plugin's settings (`config:` in a plugins file).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    /// Identical events per reconcile (default 1; at most 100000).
    repeat: Option<u32>,
    /// The events' reason (default `Seen`).
    reason: Option<String>,
}

struct Herald;

impl Controller for Herald {
    type Config = Settings;

    fn manifest() -> Manifest {
        Manifest::new("herald").watch(Watch::new("v1", "ConfigMap").with_labels("herald=yes"))
    }

    fn validate_config(c: &Settings) -> std::result::Result<(), String> {
        match c.repeat {
            Some(n) if n > 100_000 => Err(format!("repeat must be at most 100000, not {n}")),
            _ => Ok(()),
        }
    }

    fn reconcile(key: &str) -> Result<Action> {
        let Some(cm) = Api::all("v1", "ConfigMap").get_by_key(key)? else {
            return Ok(Action::Done);
        };
        let config = Self::config();
        let n = config.repeat.unwrap_or(1);
        let event = Event {
            type_: EventType::Normal,
            reason: config.reason.clone().unwrap_or_else(|| "Seen".into()),
            note: Some(format!("heralded {key}")),
            action: "Observe".into(),
        };
        let regarding = cm.object_ref();
        let recorder = Recorder::new();
        for _ in 0..n {
            recorder.publish(&event, &regarding);
        }
        info!("heralded {key} {n} times");
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Herald);
