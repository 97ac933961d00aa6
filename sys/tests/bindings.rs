//! The committed bindings keep bindgen's compile-time layout checks (issue 27): a regeneration
//! with `--no-layout-tests` would silently drop them, and a struct whose layout changed under
//! us would then reach the provider with wrong offsets.

const BINDINGS: [(&str, &str, &[&str]); 3] = [
    (
        "verbs.rs",
        include_str!("../src/ffi/verbs.rs"),
        &[
            "ibv_wc",
            "ibv_send_wr",
            "ibv_recv_wr",
            "ibv_qp_init_attr",
            "ibv_qp_attr",
            "ibv_port_attr",
        ],
    ),
    (
        "rdmacm.rs",
        include_str!("../src/ffi/rdmacm.rs"),
        &["rdma_cm_event", "rdma_conn_param", "rdma_cm_id"],
    ),
    (
        "pmix.rs",
        include_str!("../src/ffi/pmix.rs"),
        &["pmix_value", "pmix_info", "pmix_proc"],
    ),
];

#[test]
fn every_struct_the_code_uses_has_its_layout_checked() {
    for (file, text, structs) in BINDINGS {
        for s in structs {
            assert!(
                text.contains(&format!("[\"Size of {s}\"]")),
                "{file}: no size check for {s}: regenerate with sys/gen-bindings.sh (layout tests on)"
            );
            assert!(
                text.contains(&format!("\"Offset of field: {s}::")),
                "{file}: no field offset checks for {s}"
            );
        }
    }
}

#[test]
fn the_generator_keeps_layout_tests_on() {
    let script = include_str!("../gen-bindings.sh");
    assert!(
        !script.contains("--no-layout-tests"),
        "sys/gen-bindings.sh passes --no-layout-tests"
    );
}
