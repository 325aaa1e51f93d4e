//! Unit tests of `kserve/mod.rs`.

use super::*;

#[test]
fn error_body_holds_the_message() {
    assert_eq!(Value::Object(error_body("no such model")).to_string(), r#"{"error":"no such model"}"#);
}
