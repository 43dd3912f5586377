//! A valid component of another world: the host must refuse it with a clear message.
wit_bindgen::generate!({ path: "wit", world: "other" });

struct Other;

impl Guest for Other {
    fn hello() -> String {
        "hello".into()
    }
}

export!(Other);
