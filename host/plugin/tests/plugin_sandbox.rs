//! Sandboxed calls: deadlines, memory caps, permission checks, lister reads, queue and stdio.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kwh_client::object::Object;
use kwh_plugin::backend::WriteOp;
use kwh_plugin::{GuestError, Limits, Outcome, Plugin};
use support::fakes::Fakes;
use support::guests::guest;

const T: Duration = Duration::from_secs(120);

async fn start(name: &str, limits: Limits, fakes: &Fakes) -> Plugin {
    let engine = support::engine();
    let loaded = tokio::time::timeout(T, engine.load(&guest(name), limits))
        .await
        .expect("in time")
        .expect("loads");
    loaded.activate(fakes.backends())
}

#[tokio::test]
async fn looping_guest_hits_its_deadline_and_a_fresh_instance_works_after() {
    let fakes = Fakes::new();
    let limits = Limits {
        reconcile_deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let plugin = start("spin", limits, &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let started = Instant::now();
    let err = tokio::time::timeout(T, inst.reconcile("loop"))
        .await
        .expect("the deadline fires long before the test timeout")
        .expect_err("must not finish");
    let elapsed = started.elapsed();
    assert_eq!(
        err,
        GuestError::DeadlineExceeded(Duration::from_millis(200))
    );
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(!inst.is_live(), "the instance is discarded");
    assert_eq!(plugin.stats().deadline_hits.load(Ordering::Relaxed), 1);

    let out = tokio::time::timeout(T, inst.reconcile("ok"))
        .await
        .expect("in time")
        .expect("fresh instance");
    assert_eq!(out, Ok(Outcome::Done));
    // The throwaway instance that answered `manifest` at load, the first worker instance, and
    // its replacement.
    assert_eq!(plugin.stats().instantiations.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn a_trap_discards_the_instance_and_the_next_call_gets_a_fresh_one() {
    let fakes = Fakes::new();
    let plugin = start("spin", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let (logs, _guard) = support::logs::capture();
    let err = tokio::time::timeout(T, inst.reconcile("panic"))
        .await
        .expect("in time")
        .expect_err("a panic is a trap");
    assert!(
        matches!(&err, GuestError::Trap(m) if m.contains("unreachable")),
        "{err}"
    );
    assert!(!inst.is_live());
    assert_eq!(plugin.stats().traps.load(Ordering::Relaxed), 1);
    let lines = logs.lines();
    assert!(
        lines.iter().any(|l| l.target == "plugin::stderr"
            && l.plugin.as_deref() == Some("spin")
            && l.message.contains("spin refuses key panic")),
        "the panic message reaches the log: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.level == tracing::Level::WARN
            && l.plugin.as_deref() == Some("spin")
            && l.message.contains("instance discarded")),
        "{lines:?}"
    );
    let out = inst.reconcile("ok").await.expect("fresh instance");
    assert_eq!(out, Ok(Outcome::Done));
}

/// On a single-threaded runtime, timers only fire while the guest spins if its epoch yields hand
/// the thread back to tokio: the sleeps must finish long before the guest's deadline.
#[tokio::test(flavor = "current_thread")]
async fn a_looping_guest_does_not_block_other_tasks() {
    let fakes = Fakes::new();
    let limits = Limits {
        reconcile_deadline: Duration::from_secs(3),
        ..Limits::default()
    };
    let plugin = start("spin", limits, &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    inst.warm().await.expect("instantiate");
    let spinning = tokio::spawn(async move { inst.reconcile("loop").await });
    let started = Instant::now();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let slept = started.elapsed();
    assert!(!spinning.is_finished(), "the guest is still running");
    assert!(slept < Duration::from_secs(1), "timers starved: {slept:?}");
    let r = tokio::time::timeout(T, spinning)
        .await
        .expect("in time")
        .expect("join");
    assert!(matches!(r, Err(GuestError::DeadlineExceeded(_))));
}

/// On tokio's multi-thread runtime a spinning call may resume on either worker after each of its
/// yields, and two spin at once: whichever thread polls a call must keep the epoch advancing
/// (each arms its own timer signal), so both end at their deadline. Bounded without the runtime's
/// timers (both workers spin): the results come back over a channel read with a timeout, and the
/// runtime is shut down without waiting for its workers.
#[test]
fn looping_guests_on_the_multi_thread_runtime_hit_their_deadlines() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let fakes = Fakes::new();
    let limits = Limits {
        reconcile_deadline: Duration::from_millis(300),
        ..Limits::default()
    };
    let plugin = rt.block_on(start("spin", limits, &fakes));
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    for _ in 0..2 {
        let mut inst = plugin.instance().expect("instance");
        let tx = tx.clone();
        rt.spawn(async move {
            let _ = tx.send(inst.reconcile("loop").await);
        });
    }
    let results: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(30)))
        .collect();
    let elapsed = started.elapsed();
    rt.shutdown_timeout(Duration::from_millis(100));
    for r in results {
        let r = r.expect("a spinning guest was never stopped");
        assert_eq!(
            r,
            Err(GuestError::DeadlineExceeded(Duration::from_millis(300)))
        );
    }
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert_eq!(plugin.stats().deadline_hits.load(Ordering::Relaxed), 2);
}

/// A reconcile whose write hangs: it must end at the deadline with the write issued and the
/// instance discarded.
async fn hits_the_deadline(inst: &mut kwh_plugin::PluginInstance, fakes: &Fakes, timer: &str) {
    fakes.client.hang.store(true, Ordering::Relaxed);
    let writes = fakes.client.writes.lock().len();
    let started = Instant::now();
    let err = tokio::time::timeout(T, inst.reconcile("create-configmap"))
        .await
        .unwrap_or_else(|_| panic!("{timer}: the backstop fires long before the test timeout"))
        .expect_err("must not finish");
    fakes.client.hang.store(false, Ordering::Relaxed);
    assert_eq!(
        err,
        GuestError::DeadlineExceeded(Duration::from_millis(200)),
        "{timer}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200),
        "{timer}: cut before the deadline, after {took:?}"
    );
    assert!(took < Duration::from_secs(10), "{timer}");
    assert_eq!(
        fakes.client.writes.lock().len(),
        writes + 1,
        "{timer}: the write was issued"
    );
    assert!(!inst.is_live(), "{timer}");
}

#[tokio::test]
async fn a_host_call_that_never_returns_still_hits_the_reconcile_deadline() {
    let fakes = Fakes::new();
    let limits = Limits {
        reconcile_deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let plugin = start("rogue", limits, &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    // The backstop's timer is kept from call to call: a hung call leaves it fired, a finished
    // one pending (the next call moves it later). A fresh, a fired and a pending timer must
    // each stop a call that hangs.
    hits_the_deadline(&mut inst, &fakes, "a fresh timer").await;
    hits_the_deadline(&mut inst, &fakes, "a fired timer").await;
    let out = inst
        .reconcile("create-configmap")
        .await
        .expect("fresh instance");
    assert_eq!(out, Ok(Outcome::Done));
    hits_the_deadline(&mut inst, &fakes, "a pending timer").await;
}

#[tokio::test]
async fn memory_cap_is_enforced_and_the_instance_replaced() {
    let fakes = Fakes::new();
    let limits = Limits {
        memory_bytes: 8 << 20,
        ..Limits::default()
    };
    let plugin = start("hog", limits, &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let err = tokio::time::timeout(T, inst.reconcile("grow"))
        .await
        .expect("in time")
        .expect_err("must die");
    assert_eq!(err, GuestError::MemoryExhausted { limit: 8 << 20 });
    assert_eq!(plugin.stats().memory_exhaustions.load(Ordering::Relaxed), 1);
    assert!(!inst.is_live());
    let out = tokio::time::timeout(T, inst.reconcile("ok"))
        .await
        .expect("in time")
        .expect("fresh instance");
    assert_eq!(out, Ok(Outcome::Done));
}

#[tokio::test]
async fn undeclared_write_is_refused_with_a_permission_error_the_guest_sees() {
    let fakes = Fakes::new();
    let plugin = start("rogue", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let (logs, _guard) = support::logs::capture();

    let out = tokio::time::timeout(T, inst.reconcile("create-secret"))
        .await
        .expect("in time")
        .expect("no trap");
    let msg = out.expect_err("the guest reports the refusal");
    assert!(msg.starts_with("403 Forbidden: "), "{msg}");
    assert!(msg.contains("may not create Secret (v1)"), "{msg}");

    // A declared kind with an undeclared verb is refused too.
    let msg = inst
        .reconcile("delete-configmap")
        .await
        .expect("no trap")
        .expect_err("refused");
    assert!(
        msg.starts_with("403 Forbidden: ") && msg.contains("may not delete ConfigMap"),
        "{msg}"
    );

    // Reads of unwatched kinds are refused as well.
    let msg = inst
        .reconcile("read-secret")
        .await
        .expect("no trap")
        .expect_err("refused");
    assert!(
        msg.starts_with("403 Forbidden: ") && msg.contains("may not read Secret"),
        "{msg}"
    );

    assert!(
        fakes.client.writes.lock().is_empty(),
        "nothing reached the client"
    );
    let refusals: Vec<_> = logs
        .lines()
        .into_iter()
        .filter(|l| l.level == tracing::Level::WARN && l.message.contains("refused"))
        .collect();
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    assert!(refusals
        .iter()
        .all(|l| l.plugin.as_deref() == Some("rogue")));

    // The declared write goes through to the client backend.
    let out = inst.reconcile("create-configmap").await.expect("no trap");
    assert_eq!(out, Ok(Outcome::Done));
    let writes = fakes.client.writes.lock();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].op, WriteOp::Create);
    assert_eq!(
        (writes[0].api_version.as_str(), writes[0].kind.as_str()),
        ("v1", "ConfigMap")
    );
    assert_eq!(writes[0].namespace.as_deref(), Some("default"));
}

#[tokio::test]
async fn lister_get_feeds_requeue_after_and_stdio_becomes_tracing() {
    let fakes = Fakes::new();
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7"}}"#;
    fakes.lister.insert("v1", "ConfigMap", cm);
    let (logs, _guard) = support::logs::capture();
    let plugin = start("getter", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");

    let out = tokio::time::timeout(T, inst.reconcile("ns/a"))
        .await
        .expect("in time")
        .expect("no trap");
    assert_eq!(
        out,
        Ok(Outcome::RequeueAfter(
            Duration::from_millis(cm.len() as u64)
        ))
    );
    let out = inst.reconcile("ns/absent").await.expect("no trap");
    assert_eq!(out, Ok(Outcome::Done));

    let cm_obj = Object::from_bytes(Bytes::copy_from_slice(cm.as_bytes())).expect("object");
    inst.on_add(0, &cm_obj).await.expect("on-add");
    assert_eq!(
        fakes.queue.added.lock().as_slice(),
        &[(format!("added-{}", cm.len()), Duration::ZERO)]
    );
    drop(inst);

    let lines = logs.lines();
    let find = |target: &str, text: &str| {
        lines
            .iter()
            .find(|l| l.target == target && l.message == text)
            .unwrap_or_else(|| panic!("no {target} line {text:?} in {lines:?}"))
            .clone()
    };
    let out = find("plugin::stdout", "reconciling ns/a");
    assert_eq!(out.plugin.as_deref(), Some("getter"));
    let err = find("plugin::stderr", "stderr line for ns/a");
    assert_eq!(err.plugin.as_deref(), Some("getter"));
    let log = find("plugin::guest", "looking up ns/a");
    assert_eq!(log.plugin.as_deref(), Some("getter"));
    assert_eq!(log.level, tracing::Level::INFO);
    // Output during load is tagged with the file's stem until the manifest names the plugin.
    let early = find("plugin::stdout", "getter manifest requested");
    assert_eq!(early.plugin.as_deref(), Some("guest_getter"));
}

#[tokio::test]
async fn nothing_ambient_environment_files_or_network() {
    let fakes = Fakes::new();
    // Whatever the test process has in its environment must not leak into the guest.
    assert!(std::env::vars_os().count() > 0);
    let plugin = start("getter", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let report = tokio::time::timeout(T, inst.reconcile("ambient"))
        .await
        .expect("in time")
        .expect("no trap")
        .expect_err("the guest reports through its error");
    assert_eq!(report, "env=0 args=0 root=false cwd=false udp=false");
}

/// A real listener on loopback, reachable from this process: only the sandbox can keep the guest
/// from connecting to it. The guest also looks up `localhost`, which resolves anywhere that name
/// lookups are allowed.
#[tokio::test]
async fn tcp_to_a_live_loopback_listener_and_name_lookups_are_denied() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    // The port does accept connections from outside the sandbox.
    let probe = std::net::TcpStream::connect(("127.0.0.1", port)).expect("host-side connect");
    let accepted =
        support::cluster::eventually(Duration::from_secs(5), || listener.accept().is_ok()).await;
    assert!(accepted, "the listener accepts a host-side connection");
    drop(probe);

    let fakes = Fakes::new();
    let plugin = start("getter", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let report = tokio::time::timeout(T, inst.reconcile(&format!("net/{port}")))
        .await
        .expect("in time")
        .expect("no trap")
        .expect_err("the guest reports through its error");
    let from_guest = listener.accept();
    let (tcp, dns) = report.split_once("; ").expect("two probes");
    assert!(
        tcp.starts_with("tcp=PermissionDenied"),
        "the connect is refused by the sandbox, not by the network: {report}"
    );
    // The guest's libc reports a refused lookup as EAI_FAIL ("Non-recoverable error"); a name
    // the resolver does not know would be EAI_NONAME instead.
    assert!(
        dns.starts_with("dns=") && !dns.starts_with("dns=ok") && dns.contains("Non-recoverable"),
        "the lookup of localhost is refused by the sandbox: {report}"
    );
    // A connection the guest had opened would be waiting in the backlog by now.
    match from_guest {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener accepted a connection from the guest: {other:?}"),
    }
}

#[tokio::test]
async fn instances_per_plugin_are_capped() {
    let fakes = Fakes::new();
    let limits = Limits {
        max_instances: 2,
        ..Limits::default()
    };
    let plugin = start("noop", limits, &fakes).await;
    let a = plugin.instance().expect("first");
    let _b = plugin.instance().expect("second");
    assert_eq!(
        plugin.instance().err(),
        Some(GuestError::TooManyInstances(2))
    );
    drop(a);
    plugin.instance().expect("a slot was freed");
}

/// Calls reuse one instance: 2,000 notifications with a 4 KiB object, then an update and a
/// delete, instantiate nothing more. (What a call costs is measured by the `plugin` benchmark,
/// in a release build; see BENCHMARKS.md.)
#[tokio::test]
async fn two_thousand_calls_reuse_one_instance() {
    let fakes = Fakes::new();
    let plugin = start("noop", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    inst.warm().await.expect("instantiate");
    let obj = Object::from_value(&serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns"},
        "data": {"x": "x".repeat(4000)},
    }))
    .expect("object");
    for i in 0..2000u32 {
        inst.on_add(0, &obj).await.expect("call");
        if i % 500 == 0 {
            tokio::task::yield_now().await;
        }
    }
    inst.on_update(0, &obj, &obj).await.expect("on-update");
    inst.on_delete(0, &obj, true).await.expect("on-delete");
    // The load-time instance plus this one: 2002 calls reused a single instance.
    assert_eq!(plugin.stats().instantiations.load(Ordering::Relaxed), 2);
}

/// A guest that logs 20,000 lines, a 1 MiB message and a 1 MiB stdout line in one reconcile
/// costs the host a bounded log: a burst of 1,000 lines, each at most 4 KiB (the stdout line
/// in 4 KiB pieces, counted as lines), the rest dropped and counted; the next line let
/// through says how many were dropped.
#[tokio::test]
async fn log_spam_is_held_to_the_plugins_budget_and_counted() {
    use kwh_plugin::guest_log::{BURST, MAX_LINE, PER_SECOND};
    let (logs, _guard) = support::logs::capture();
    let fakes = Fakes::new();
    let plugin = start("chatter", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let began = Instant::now();
    let out = tokio::time::timeout(T, inst.reconcile("default/chatter-1"))
        .await
        .expect("in time")
        .expect("no sandbox failure");
    assert_eq!(out, Ok(Outcome::Done));
    let mine = |l: &support::logs::Line| {
        l.plugin.as_deref() == Some("chatter") && l.target.starts_with("plugin::")
    };
    let lines: Vec<_> = logs.lines().into_iter().filter(mine).collect();
    // The burst, and what the budget refilled while the reconcile ran: each line let through
    // after some were dropped comes with the line saying how many (20,257 were offered).
    let allowed =
        f64::from(BURST) + 2.0 * f64::from(PER_SECOND) * began.elapsed().as_secs_f64() + 2.0;
    assert!(
        lines.len() as f64 <= allowed,
        "{} lines logged, {allowed:.0} allowed",
        lines.len()
    );
    assert!(
        lines.len() >= BURST as usize - 2,
        "{} lines logged",
        lines.len()
    );
    let longest = lines.iter().map(|l| l.message.len()).max().unwrap_or(0);
    assert!(longest <= MAX_LINE + 64, "a line of {longest} bytes");
    // 20,000 + 1 + 256 pieces of the stdout line, less what the burst let through.
    let dropped = plugin.log_lines_dropped();
    assert!(dropped >= 19_000, "{dropped} dropped");
    // Once the budget refills a little, the next line let through says how many were dropped.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let out = tokio::time::timeout(T, inst.reconcile("default/chatter-2"))
        .await
        .expect("in time")
        .expect("no sandbox failure");
    assert_eq!(out, Ok(Outcome::Done));
    let summary = logs
        .lines()
        .into_iter()
        .filter(mine)
        .find(|l| l.message.contains("log lines of this plugin dropped"));
    assert!(summary.is_some(), "no line says lines were dropped");
}

fn havoc_cm(fakes: &Fakes, name: &str, mode: &str) {
    fakes.lister.insert(
        "v1",
        "ConfigMap",
        &serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "1"},
            "data": {"mode": mode}})
        .to_string(),
    );
}

/// Recursion without end traps at the guest's stack limit (the host's own stack is not
/// touched); the instance is replaced and the next call works.
#[tokio::test]
async fn unbounded_recursion_traps_at_the_stack_limit() {
    let fakes = Fakes::new();
    havoc_cm(&fakes, "deep", "recurse");
    let plugin = start("havoc", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let err = tokio::time::timeout(T, inst.reconcile("default/deep"))
        .await
        .expect("in time")
        .expect_err("a trap");
    // Rust keeps its stack in linear memory: running off it is an out-of-bounds access; a
    // guest whose native frames outgrow wasmtime's 1 MiB stack traps "call stack exhausted".
    let GuestError::Trap(msg) = &err else {
        panic!("{err:?}");
    };
    assert!(
        msg.contains("out of bounds memory access") || msg.contains("call stack exhausted"),
        "{msg}"
    );
    assert_eq!(plugin.stats().traps.load(Ordering::Relaxed), 1);
    let out = tokio::time::timeout(T, inst.reconcile("default/other"))
        .await
        .expect("in time")
        .expect("a fresh instance");
    assert_eq!(out, Ok(Outcome::Done));
}

/// A 24 MiB error message (it fit in the guest's memory) is a failure of the plugin, not its
/// report on the key: the instance is replaced (and the plugin's health counts it, so that
/// quarantine stops the repeats), and the error says how long the message was, not what.
#[tokio::test]
async fn a_huge_return_value_is_a_failure_of_the_plugin() {
    let fakes = Fakes::new();
    havoc_cm(&fakes, "big", "bigreturn");
    let plugin = start("havoc", Limits::default(), &fakes).await;
    let mut inst = plugin.instance().expect("instance");
    let err = tokio::time::timeout(T, inst.reconcile("default/big"))
        .await
        .expect("in time")
        .expect_err("a failure of the plugin");
    assert_eq!(
        err,
        GuestError::ResultTooLarge {
            what: "reconcile returned an error message",
            bytes: 24 << 20,
            limit: kwh_plugin::instance::MAX_ERROR_MESSAGE,
        }
    );
    assert!(err.to_string().len() < 200, "{err}");
    // The next call gets a fresh instance.
    havoc_cm(&fakes, "fine", "none");
    let out = tokio::time::timeout(T, inst.reconcile("default/fine"))
        .await
        .expect("in time")
        .expect("a fresh instance, no sandbox failure");
    assert_eq!(out, Ok(Outcome::Done));
}

/// Ten million distinct keys enqueued in one reconcile: the plugin's queue holds its bound and
/// counts the rest as refused; the call ends (done, or at its deadline).
#[tokio::test]
async fn an_enqueue_storm_meets_the_queues_bound() {
    use kwh_plugin::backend::workqueue::{QueueRefusals, WorkqueueBackend};
    let fakes = Fakes::new();
    havoc_cm(&fakes, "storm", "storm");
    let queue = kwh_plugin::reconcile::PluginQueue::new(
        kwh_informer::workqueue::default_controller_rate_limiter(),
    );
    let refusals = std::sync::Arc::new(QueueRefusals::default());
    let mut backends = fakes.backends();
    backends.queue = std::sync::Arc::new(WorkqueueBackend::new(queue.clone()).bounded(
        "havoc",
        50_000,
        refusals.clone(),
    ));
    let engine = support::engine();
    let limits = Limits {
        reconcile_deadline: Duration::from_secs(20),
        ..Limits::default()
    };
    let plugin = tokio::time::timeout(T, engine.load(&guest("havoc"), limits))
        .await
        .expect("in time")
        .expect("loads")
        .activate(backends);
    let mut inst = plugin.instance().expect("instance");
    let r = tokio::time::timeout(T, inst.reconcile("default/storm"))
        .await
        .expect("in time");
    assert!(
        matches!(
            r,
            Ok(Ok(Outcome::Done)) | Err(GuestError::DeadlineExceeded(_))
        ),
        "{r:?}"
    );
    assert_eq!(queue.len(), 50_000, "the bound holds");
    let refused = refusals.full.load(Ordering::Relaxed);
    assert!(refused > 100_000, "{refused} refused");
}
