#[test]
fn scenarios() {
    kwh_testing::run_scenarios();
}
