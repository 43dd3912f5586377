//! The WIT contract itself: every item carries a doc comment, and the package is versioned.

const WIT: &str = include_str!("../../../wit/controller.wit");

/// Lines that declare something (package, interface, world, type, field, case, function, import,
/// export) must follow a `///` line; `use` lines, closing braces and blanks are not items.
#[test]
fn every_wit_item_has_a_doc_comment() {
    let lines: Vec<&str> = WIT.lines().map(str::trim).collect();
    let mut undocumented = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let is_item = !(line.is_empty()
            || line.starts_with("//")
            || line.starts_with('}')
            || line.starts_with("use "));
        if is_item && (i == 0 || !lines[i - 1].starts_with("///")) {
            undocumented.push(format!("{}: {line}", i + 1));
        }
    }
    assert!(
        undocumented.is_empty(),
        "undocumented items:\n{}",
        undocumented.join("\n")
    );
}

#[test]
fn package_is_versioned_and_world_declares_the_contract() {
    assert!(WIT.contains("package kube:controller@0.2.0;"));
    for export in [
        "manifest",
        "on-add",
        "on-update",
        "on-delete",
        "reconcile",
        "validate-config",
    ] {
        assert!(WIT.contains(&format!("export {export}: func(")), "{export}");
    }
    for import in ["lister", "client", "queue", "log", "config", "events"] {
        assert!(WIT.contains(&format!("import {import};")), "{import}");
    }
}

/// The 0.1.0 contract stays in the tree, unchanged but for its header, so the host keeps
/// serving components built against it.
#[test]
fn the_0_1_0_contract_is_kept_frozen() {
    let old = include_str!("../../../wit/0.1.0/controller.wit");
    assert!(old.contains("package kube:controller@0.1.0;"));
    assert!(old.contains("export on-add: func(watch: u32, obj: json);"));
    assert!(!old.contains("validate-config") && !old.contains("interface events"));
}
