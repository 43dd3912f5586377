//! The host side of the guest's imports: permission checks against the manifest, then the backends.
//!
//! A refused call is not a trap: the guest gets a 403 `Forbidden` api-error it can handle, and the
//! host logs the plugin, the kind and the verb so an operator can fix the manifest (or the guest).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use wasmtime::component::{HasSelf, Linker, WasmStr};
use wasmtime::StoreContextMut;

use super::backend::{
    ApiError, BoxFuture, DeleteParams, PatchKind, Propagation, WriteOp, WriteRequest,
};
use super::bindings::v0_1;
use super::bindings::v0_2::kube::controller::{
    client, config, events, lister, log, queue, types as wit,
};
use super::bindings::v0_2::ControllerBase;
use super::manifest::Verb;
use super::own_keys::Change;
use super::state::GuestState;
use crate::events::{EventType, NewEvent, ObjectRef};
use kwh_client::object::{object_key, Object};
use kwh_sandbox::Sandboxed;

/// The linker every plugin is pre-linked against: WASI p2 (with nothing ambient granted per store)
/// and the `kube:controller` imports of every contract version the host serves, side by side
/// (each version's interfaces are separate instances, `…/lister@0.1.0` and `…/lister@0.2.0`).
pub(crate) fn linker(
    engine: &kwh_sandbox::Engine,
) -> wasmtime::Result<Linker<Sandboxed<GuestState>>> {
    let mut linker = engine.linker::<GuestState>()?;
    type Own = HasSelf<GuestState>;
    ControllerBase::add_to_linker::<_, Own>(&mut linker, Sandboxed::data_mut)?;
    v0_1::Controller::add_to_linker::<_, Own>(&mut linker, Sandboxed::data_mut)?;
    for version in ["0.1.0", "0.2.0"] {
        add_zero_copy_lister(&mut linker, version)?;
    }
    Ok(linker)
}

/// The lister imports that return whole objects, registered over the generated ones.
///
/// The generated bindings type `list<u8>` as `Vec<u8>`: the host would copy each object out of
/// the store into a fresh `Vec`, and wasmtime would copy that into guest memory. Returning the
/// store's shared `Bytes` instead (a reference-count bump) leaves one copy: straight into the
/// guest's memory. The checks and backend calls are the same helpers the generated trait
/// methods use, so both paths answer alike.
fn add_zero_copy_lister(
    linker: &mut Linker<Sandboxed<GuestState>>,
    version: &str,
) -> wasmtime::Result<()> {
    type Found = Result<Option<Bytes>, wit::ApiError>;
    type Many = Result<Vec<Bytes>, wit::ApiError>;
    fn raw(objs: Vec<Object>) -> Vec<Bytes> {
        objs.into_iter().map(|o| o.raw_bytes()).collect()
    }
    linker.allow_shadowing(true);
    let mut lister = linker.instance(&format!("kube:controller/lister@{version}"))?;
    // Every reconcile's read: its four strings are read in place in guest memory (validated,
    // not copied into host `String`s, which cost more than the lookup itself).
    lister.func_wrap(
        "get",
        |store: StoreContextMut<'_, Sandboxed<GuestState>>,
         (api_version, kind, namespace, name): (WasmStr, WasmStr, Option<WasmStr>, WasmStr)| {
            let namespace = namespace.as_ref().map(|n| n.to_str(&store)).transpose()?;
            let found: Found = store
                .data()
                .data()
                .lister_get(
                    &api_version.to_str(&store)?,
                    &kind.to_str(&store)?,
                    namespace.as_deref(),
                    &name.to_str(&store)?,
                )
                .map(|o| o.map(|o| o.raw_bytes()));
            Ok((found,))
        },
    )?;
    lister.func_wrap(
        "list",
        |mut store: StoreContextMut<'_, Sandboxed<GuestState>>,
         (api_version, kind, namespace, selector): (
            String,
            String,
            Option<String>,
            Option<String>,
        )| {
            let objs: Many = store
                .data_mut()
                .data_mut()
                .lister_list(
                    &api_version,
                    &kind,
                    namespace.as_deref(),
                    selector.as_deref(),
                    "list",
                )
                .map(raw);
            Ok((objs,))
        },
    )?;
    lister.func_wrap(
        "by-index",
        |mut store: StoreContextMut<'_, Sandboxed<GuestState>>,
         (api_version, kind, index_name, index_value): (String, String, String, String)| {
            let objs: Many = store
                .data_mut()
                .data_mut()
                .lister_by_index(&api_version, &kind, &index_name, &index_value, "by-index")
                .map(raw);
            Ok((objs,))
        },
    )?;
    // Added in 0.2.0: by watch number and the key as received, one string read in place.
    if version != "0.1.0" {
        lister.func_wrap(
            "get-by-key",
            |store: StoreContextMut<'_, Sandboxed<GuestState>>, (watch, key): (u32, WasmStr)| {
                let found: Found = store
                    .data()
                    .data()
                    .lister_get_by_key(watch, &key.to_str(&store)?)
                    .map(|o| o.map(|o| o.raw_bytes()));
                Ok((found,))
            },
        )?;
    }
    linker.allow_shadowing(false);
    Ok(())
}

impl From<ApiError> for wit::ApiError {
    fn from(e: ApiError) -> Self {
        wit::ApiError {
            code: e.code,
            reason: e.reason,
            message: e.message,
        }
    }
}

impl GuestState {
    fn check_read(&self, api_version: &str, kind: &str, call: &str) -> Result<(), wit::ApiError> {
        if self.ctx.manifest.may_read(api_version, kind) {
            return Ok(());
        }
        tracing::warn!(plugin = %self.ctx.name, %api_version, %kind, call,
            "lister read refused: kind not watched by the manifest");
        Err(ApiError::forbidden(format!(
            "plugin {:?} may not read {kind} ({api_version}): its manifest does not watch that kind",
            self.ctx.name
        ))
        .into())
    }

    fn lister_get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, wit::ApiError> {
        self.check_read(api_version, kind, "get")?;
        Ok(self
            .ctx
            .backends
            .lister
            .get(api_version, kind, namespace, name)?)
    }

    /// The watch number is the whole permission check: every watch of the manifest is
    /// readable, and the number names one of them or none.
    fn lister_get_by_key(&self, watch: u32, key: &str) -> Result<Option<Object>, wit::ApiError> {
        let watches = self.ctx.manifest.watches.len();
        if usize::try_from(watch).map_or(true, |w| w >= watches) {
            return Err(ApiError::bad_request(format!(
                "plugin {:?} has no watch {watch}: its manifest declares {watches}",
                self.ctx.name
            ))
            .into());
        }
        Ok(self.ctx.backends.lister.get_by_key(watch, key)?)
    }

    fn lister_list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        call: &str,
    ) -> Result<Vec<Object>, wit::ApiError> {
        self.check_read(api_version, kind, call)?;
        Ok(self
            .ctx
            .backends
            .lister
            .list(api_version, kind, namespace, label_selector)?)
    }

    fn lister_by_index(
        &self,
        api_version: &str,
        kind: &str,
        index_name: &str,
        index_value: &str,
        call: &str,
    ) -> Result<Vec<Object>, wit::ApiError> {
        self.check_read(api_version, kind, call)?;
        Ok(self
            .ctx
            .backends
            .lister
            .by_index(api_version, kind, index_name, index_value)?)
    }

    /// `verb` is the manifest verb that allows the call; `op` names the request in the refusal,
    /// as the API server's RBAC would (`patch NamespaceDefaults/status`), since one manifest verb
    /// can cover several requests.
    fn check_write(
        &self,
        api_version: &str,
        kind: &str,
        verb: Verb,
        op: &WriteOp,
    ) -> Result<(), wit::ApiError> {
        if self.ctx.manifest.may_write(api_version, kind, verb) {
            return Ok(());
        }
        let v = match op {
            WriteOp::PatchStatus(_) | WriteOp::ApplyStatus { .. } => "patch",
            _ => verb.rbac(),
        };
        let sub = op
            .subresource()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let needs = verb.wit_name();
        tracing::warn!(plugin = %self.ctx.name, %api_version, %kind, verb = %format_args!("{v}{sub}"),
            manifest_verb = needs, "client write refused: not declared in the manifest");
        Err(ApiError::forbidden(format!(
            "plugin {:?} may not {v} {kind}{sub} ({api_version}): not declared in its manifest's writes (needs verb {needs})",
            self.ctx.name
        ))
        .into())
    }

    /// Checks the write against the manifest and starts it; the returned future owns everything
    /// it needs, so nothing of the store is borrowed while the request is in flight.
    fn write(
        &self,
        verb: Verb,
        op: WriteOp,
        target: (String, String, Option<String>, Option<String>),
        body: Vec<u8>,
    ) -> BoxFuture<'static, Result<Option<Vec<u8>>, wit::ApiError>> {
        let (api_version, kind, namespace, name) = target;
        if let Err(e) = self.check_write(&api_version, &kind, verb, &op) {
            return Box::pin(std::future::ready(Err(e)));
        }
        let req = WriteRequest {
            op,
            api_version,
            kind,
            namespace,
            name,
            body,
            reconciling: self.reconciling().map(Arc::from),
        };
        let fut = self.ctx.backends.client.write(req);
        Box::pin(async move {
            match fut.await {
                Ok(obj) => Ok(obj.map(|b| b.to_vec())),
                Err(e) => Err(e.into()),
            }
        })
    }
}

fn expect_object(r: Result<Option<Vec<u8>>, wit::ApiError>) -> Result<Vec<u8>, wit::ApiError> {
    r?.ok_or_else(|| {
        ApiError::new(
            500,
            "InternalError",
            "the API server answered with a Status where an object was expected",
        )
        .into()
    })
}

fn meta_of(o: &Object) -> wit::ObjectMeta {
    let m = o.meta();
    wit::ObjectMeta {
        namespace: m.namespace.map(str::to_string),
        name: m.name.to_string(),
        uid: m.uid.to_string(),
        resource_version: m.resource_version.to_string(),
        generation: m.generation,
        labels: m
            .labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        deleting: m.deletion_timestamp.is_some(),
    }
}

fn key_of(o: &Object) -> String {
    object_key(o.namespace(), o.name())
}

impl wit::Host for GuestState {}

impl lister::Host for GuestState {
    fn get(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<Vec<u8>>, wit::ApiError> {
        // Shadowed by the zero-copy registration in `linker`; kept equivalent.
        let found = self.lister_get(&api_version, &kind, namespace.as_deref(), &name)?;
        Ok(found.map(|o| o.raw().to_vec()))
    }

    fn get_by_key(&mut self, watch: u32, key: String) -> Result<Option<Vec<u8>>, wit::ApiError> {
        // Shadowed by the zero-copy registration in `linker`; kept equivalent.
        let found = self.lister_get_by_key(watch, &key)?;
        Ok(found.map(|o| o.raw().to_vec()))
    }

    fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<Vec<u8>>, wit::ApiError> {
        // Shadowed by the zero-copy registration in `linker`; kept equivalent.
        let objs = self.lister_list(
            &api_version,
            &kind,
            namespace.as_deref(),
            label_selector.as_deref(),
            "list",
        )?;
        Ok(objs.iter().map(|o| o.raw().to_vec()).collect())
    }

    fn list_keys(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, wit::ApiError> {
        self.check_read(&api_version, &kind, "list-keys")?;
        let objs = self.ctx.backends.lister.list(
            &api_version,
            &kind,
            namespace.as_deref(),
            label_selector.as_deref(),
        )?;
        Ok(objs.iter().map(key_of).collect())
    }

    fn list_metadata(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<wit::ObjectMeta>, wit::ApiError> {
        self.check_read(&api_version, &kind, "list-metadata")?;
        let objs = self.ctx.backends.lister.list(
            &api_version,
            &kind,
            namespace.as_deref(),
            label_selector.as_deref(),
        )?;
        Ok(objs.iter().map(meta_of).collect())
    }

    fn by_index(
        &mut self,
        api_version: String,
        kind: String,
        index_name: String,
        index_value: String,
    ) -> Result<Vec<Vec<u8>>, wit::ApiError> {
        // Shadowed by the zero-copy registration in `linker`; kept equivalent.
        let objs =
            self.lister_by_index(&api_version, &kind, &index_name, &index_value, "by-index")?;
        Ok(objs.iter().map(|o| o.raw().to_vec()).collect())
    }

    fn keys_by_index(
        &mut self,
        api_version: String,
        kind: String,
        index_name: String,
        index_value: String,
    ) -> Result<Vec<String>, wit::ApiError> {
        self.check_read(&api_version, &kind, "keys-by-index")?;
        let objs =
            self.ctx
                .backends
                .lister
                .by_index(&api_version, &kind, &index_name, &index_value)?;
        // Sorted, as client-go's `IndexKeys` answers (spec 3.4): guests may compare or hash it.
        let mut keys: Vec<String> = objs.iter().map(key_of).collect();
        keys.sort_unstable();
        Ok(keys)
    }
}

impl From<wit::PatchType> for PatchKind {
    fn from(p: wit::PatchType) -> Self {
        match p {
            wit::PatchType::Json => PatchKind::Json,
            wit::PatchType::Merge => PatchKind::Merge,
            wit::PatchType::StrategicMerge => PatchKind::StrategicMerge,
        }
    }
}

impl From<wit::DeleteOptions> for DeleteParams {
    fn from(o: wit::DeleteOptions) -> Self {
        let (uid, rv) = o
            .preconditions
            .map_or((None, None), |p| (p.uid, p.resource_version));
        DeleteParams {
            precondition_uid: uid,
            precondition_resource_version: rv,
            propagation: o.propagation_policy.map(|p| match p {
                wit::PropagationPolicy::Orphan => Propagation::Orphan,
                wit::PropagationPolicy::Background => Propagation::Background,
                wit::PropagationPolicy::Foreground => Propagation::Foreground,
            }),
            grace_period_seconds: o.grace_period_seconds,
        }
    }
}

impl client::Host for GuestState {
    async fn create(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        obj: Vec<u8>,
    ) -> Result<Vec<u8>, wit::ApiError> {
        let target = (api_version, kind, namespace, None);
        expect_object(self.write(Verb::Create, WriteOp::Create, target, obj).await)
    }

    async fn replace(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        obj: Vec<u8>,
    ) -> Result<Vec<u8>, wit::ApiError> {
        let target = (api_version, kind, namespace, Some(name));
        expect_object(
            self.write(Verb::Update, WriteOp::Replace, target, obj)
                .await,
        )
    }

    async fn patch(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        patch_type: wit::PatchType,
        patch: Vec<u8>,
    ) -> Result<Vec<u8>, wit::ApiError> {
        let target = (api_version, kind, namespace, Some(name));
        let op = WriteOp::Patch(patch_type.into());
        expect_object(self.write(Verb::Patch, op, target, patch).await)
    }

    async fn delete(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        options: wit::DeleteOptions,
    ) -> Result<Option<Vec<u8>>, wit::ApiError> {
        let target = (api_version, kind, namespace, Some(name));
        let op = WriteOp::Delete(options.into());
        self.write(Verb::Delete, op, target, Vec::new()).await
    }

    async fn replace_status(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        obj: Vec<u8>,
    ) -> Result<Vec<u8>, wit::ApiError> {
        let target = (api_version, kind, namespace, Some(name));
        expect_object(
            self.write(Verb::UpdateStatus, WriteOp::ReplaceStatus, target, obj)
                .await,
        )
    }

    async fn apply(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        obj: Vec<u8>,
        force: bool,
    ) -> Result<Vec<u8>, wit::ApiError> {
        let target = (api_version, kind, namespace, Some(name));
        let op = WriteOp::Apply {
            field_manager: Arc::clone(&self.ctx.name),
            force,
        };
        expect_object(self.write(Verb::Patch, op, target, obj).await)
    }

    async fn patch_status(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        patch_type: wit::PatchType,
        patch: Vec<u8>,
    ) -> Result<Vec<u8>, wit::ApiError> {
        let target = (api_version, kind, namespace, Some(name));
        let op = WriteOp::PatchStatus(patch_type.into());
        expect_object(self.write(Verb::UpdateStatus, op, target, patch).await)
    }

    async fn apply_status(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        obj: Vec<u8>,
        force: bool,
    ) -> Result<Vec<u8>, wit::ApiError> {
        let target = (api_version, kind, namespace, Some(name));
        let op = WriteOp::ApplyStatus {
            field_manager: Arc::clone(&self.ctx.name),
            force,
        };
        expect_object(self.write(Verb::UpdateStatus, op, target, obj).await)
    }
}

impl queue::Host for GuestState {
    fn add(&mut self, key: String) {
        self.ctx.backends.queue.add(&key);
    }

    fn add_after(&mut self, key: String, delay_ms: u64) {
        self.ctx
            .backends
            .queue
            .add_after(&key, Duration::from_millis(delay_ms));
    }

    fn enqueue_own_keys(&mut self, watch: u32, changes: queue::Changes) {
        let bits = [
            (queue::Changes::ADD, Change::Add),
            (queue::Changes::UPDATE, Change::Update),
            (queue::Changes::DELETE, Change::Delete),
        ]
        .into_iter()
        .filter(|(wit, _)| changes.contains(*wit))
        .fold(0, |bits, (_, c)| bits | c as u8);
        self.ctx.own_keys.hand_over(watch, bits);
        tracing::debug!(plugin = %self.ctx.name, watch, ?changes, "handlers handed over: the host enqueues their keys");
    }
}

impl log::Host for GuestState {
    fn log(&mut self, level: wit::Level, message: String) {
        if self.reconciling && self.ctx.log.captures() {
            let name = match level {
                wit::Level::Trace => "TRACE",
                wit::Level::Debug => "DEBUG",
                wit::Level::Info => "INFO",
                wit::Level::Warn => "WARN",
                wit::Level::Error => "ERROR",
            };
            crate::guest_log::capture(&mut self.reconcile_log, name, &message);
        }
        if !self.ctx.log.admit() {
            return;
        }
        let plugin = &*self.ctx.name;
        let message = crate::guest_log::bounded(&message);
        match level {
            wit::Level::Trace => tracing::trace!(target: "plugin::guest", plugin, "{message}"),
            wit::Level::Debug => tracing::debug!(target: "plugin::guest", plugin, "{message}"),
            wit::Level::Info => tracing::info!(target: "plugin::guest", plugin, "{message}"),
            wit::Level::Warn => tracing::warn!(target: "plugin::guest", plugin, "{message}"),
            wit::Level::Error => tracing::error!(target: "plugin::guest", plugin, "{message}"),
        }
    }

    fn enabled(&mut self, level: wit::Level) -> bool {
        if self.reconciling && self.ctx.log.captures() {
            return true;
        }
        match level {
            wit::Level::Trace => tracing::enabled!(target: "plugin::guest", tracing::Level::TRACE),
            wit::Level::Debug => tracing::enabled!(target: "plugin::guest", tracing::Level::DEBUG),
            wit::Level::Info => tracing::enabled!(target: "plugin::guest", tracing::Level::INFO),
            wit::Level::Warn => tracing::enabled!(target: "plugin::guest", tracing::Level::WARN),
            wit::Level::Error => tracing::enabled!(target: "plugin::guest", tracing::Level::ERROR),
        }
    }
}

impl config::Host for GuestState {
    fn get(&mut self) -> Vec<u8> {
        self.ctx.config_json.to_vec()
    }
}

impl events::Host for GuestState {
    fn record(
        &mut self,
        regarding: wit::ObjectReference,
        event_type: wit::EventType,
        reason: String,
        action: String,
        note: Option<String>,
    ) {
        let plugin = &*self.ctx.name;
        if reason.is_empty() || action.is_empty() || regarding.name.is_empty() {
            tracing::warn!(plugin, %reason, %action, object = %regarding.name,
                "event dropped: reason, action and the object's name are required");
            return;
        }
        let event = NewEvent {
            regarding: ObjectRef {
                api_version: regarding.api_version,
                kind: regarding.kind,
                namespace: regarding.namespace.filter(|n| !n.is_empty()),
                name: regarding.name,
                uid: regarding.uid.filter(|u| !u.is_empty()),
            },
            event_type: match event_type {
                wit::EventType::Normal => EventType::Normal,
                wit::EventType::Warning => EventType::Warning,
            },
            reason,
            action,
            note,
        };
        self.ctx
            .backends
            .events
            .record_from(plugin, event.within_api_limits(), self.reconciling());
    }
}

/// 0.1.0's imports: the same functions over the same types (see `bindings`), so each forwards to
/// its 0.2.0 twin and both versions answer alike.
mod v0_1_imports {
    use super::super::bindings::v0_1::kube::controller::{client, lister, log, queue};
    use super::{wit, GuestState};

    type Res<T> = Result<T, wit::ApiError>;
    type Ns = Option<String>;

    impl lister::Host for GuestState {
        fn get(&mut self, av: String, kind: String, ns: Ns, name: String) -> Res<Option<Vec<u8>>> {
            super::lister::Host::get(self, av, kind, ns, name)
        }
        fn list(&mut self, av: String, kind: String, ns: Ns, sel: Ns) -> Res<Vec<Vec<u8>>> {
            super::lister::Host::list(self, av, kind, ns, sel)
        }
        fn list_keys(&mut self, av: String, kind: String, ns: Ns, sel: Ns) -> Res<Vec<String>> {
            super::lister::Host::list_keys(self, av, kind, ns, sel)
        }
        fn list_metadata(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            sel: Ns,
        ) -> Res<Vec<wit::ObjectMeta>> {
            super::lister::Host::list_metadata(self, av, kind, ns, sel)
        }
        fn by_index(
            &mut self,
            av: String,
            kind: String,
            i: String,
            v: String,
        ) -> Res<Vec<Vec<u8>>> {
            super::lister::Host::by_index(self, av, kind, i, v)
        }
        fn keys_by_index(
            &mut self,
            av: String,
            kind: String,
            i: String,
            v: String,
        ) -> Res<Vec<String>> {
            super::lister::Host::keys_by_index(self, av, kind, i, v)
        }
    }

    impl client::Host for GuestState {
        async fn create(&mut self, av: String, kind: String, ns: Ns, obj: Vec<u8>) -> Res<Vec<u8>> {
            super::client::Host::create(self, av, kind, ns, obj).await
        }
        async fn replace(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            name: String,
            obj: Vec<u8>,
        ) -> Res<Vec<u8>> {
            super::client::Host::replace(self, av, kind, ns, name, obj).await
        }
        async fn patch(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            name: String,
            pt: wit::PatchType,
            patch: Vec<u8>,
        ) -> Res<Vec<u8>> {
            super::client::Host::patch(self, av, kind, ns, name, pt, patch).await
        }
        async fn delete(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            name: String,
            options: wit::DeleteOptions,
        ) -> Res<Option<Vec<u8>>> {
            super::client::Host::delete(self, av, kind, ns, name, options).await
        }
        async fn replace_status(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            name: String,
            obj: Vec<u8>,
        ) -> Res<Vec<u8>> {
            super::client::Host::replace_status(self, av, kind, ns, name, obj).await
        }
        async fn apply(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            name: String,
            obj: Vec<u8>,
            force: bool,
        ) -> Res<Vec<u8>> {
            super::client::Host::apply(self, av, kind, ns, name, obj, force).await
        }
        async fn patch_status(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            name: String,
            pt: wit::PatchType,
            patch: Vec<u8>,
        ) -> Res<Vec<u8>> {
            super::client::Host::patch_status(self, av, kind, ns, name, pt, patch).await
        }
        async fn apply_status(
            &mut self,
            av: String,
            kind: String,
            ns: Ns,
            name: String,
            obj: Vec<u8>,
            force: bool,
        ) -> Res<Vec<u8>> {
            super::client::Host::apply_status(self, av, kind, ns, name, obj, force).await
        }
    }

    impl queue::Host for GuestState {
        fn add(&mut self, key: String) {
            super::queue::Host::add(self, key)
        }
        fn add_after(&mut self, key: String, delay_ms: u64) {
            super::queue::Host::add_after(self, key, delay_ms)
        }
    }

    impl log::Host for GuestState {
        fn log(&mut self, level: wit::Level, message: String) {
            super::log::Host::log(self, level, message)
        }
        fn enabled(&mut self, level: wit::Level) -> bool {
            super::log::Host::enabled(self, level)
        }
    }
}
