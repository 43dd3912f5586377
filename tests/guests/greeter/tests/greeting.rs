use kwh_testing::{Harness, ReconcileOutcome, json};

#[test]
fn the_greeting_is_owned_by_its_configmap() {
    kwh_testing::block_on(async {
        let mut h = Harness::for_this_crate().build().await.unwrap();
        let team = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "team", "namespace": "default", "labels": {"greet": "yes"}}});
        h.add(team).await.unwrap();
        assert_eq!(h.reconcile("default/team").await, ReconcileOutcome::Done);

        let get = |name| h.get("v1", "ConfigMap", Some("default"), name).unwrap();
        let (team, greeting) = (get("team"), get("team-greeting"));
        assert_eq!(greeting["data"]["message"], "hello, team");
        let owner = &greeting["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], team["metadata"]["uid"]);
    });
}
