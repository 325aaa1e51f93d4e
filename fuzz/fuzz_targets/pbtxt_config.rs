//! Model configuration text format: `parse_config` must reject bad input with an error, never
//! panic, and whatever it accepts must survive the JSON round trip used by
//! `GET /v2/models/<m>/config` and the `config` parameter of a model load request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tritonrs::model_config::pbtxt::{config_from_json, config_to_json, parse_config};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cfg) = parse_config(text, "fuzz/config.pbtxt") else {
        return;
    };
    let json = config_to_json(&cfg);
    let text = json.to_string();
    if let Err(err) = config_from_json(&text) {
        panic!("config_to_json output does not parse back: {err}\nJSON: {text}\nconfig: {cfg:?}");
    }
});
