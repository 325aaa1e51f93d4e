//! Unit tests of the OpenAI-compatible API's translation: request bodies, core requests, chat
//! templates and the JSON of answers.

use super::request::{infer_request, parse, Endpoint, Prompt};
use super::response::{self, Meta, Usage};
use super::template::{self, strftime};
use super::*;
use crate::model_api::types::{serialize_bytes, DataType, InferResponse, ParamValue, Tensor};
use crate::proto::inference::{DataType as PbType, ModelConfig, ModelInput, ModelParameter};
use serde_json::json;

fn jv(v: Value) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(v))
}

fn parse_json(endpoint: Endpoint, v: Value) -> std::result::Result<request::Parsed, request::FieldError> {
    parse(endpoint, v.to_string().as_bytes())
}

fn input(name: &str, dt: PbType, dims: Vec<i64>) -> ModelInput {
    ModelInput { name: name.into(), data_type: dt as i32, dims, ..Default::default() }
}

fn llm_config(max_batch_size: i32) -> ModelConfig {
    ModelConfig {
        name: "llm".into(),
        max_batch_size,
        input: vec![
            input("text_input", PbType::TypeString, vec![1]),
            input("max_tokens", PbType::TypeInt32, vec![1]),
            input("temperature", PbType::TypeFp32, vec![1]),
            input("stop", PbType::TypeString, vec![-1]),
            input("stream", PbType::TypeBool, vec![1]),
        ],
        ..Default::default()
    }
}

#[test]
fn completion_bodies_are_read_and_checked() {
    let p = parse_json(
        Endpoint::Completions,
        json!({"model": "m", "prompt": ["hi"], "stream": true, "seed": null,
        "stream_options": {"include_usage": true}, "top_p": 0.5}),
    )
    .unwrap();
    assert_eq!((p.model.as_str(), p.stream, p.include_usage), ("m", true, true));
    assert!(matches!(p.prompt, Prompt::Text(ref t) if t == "hi"));
    // `stream` goes on to the model; nulls are dropped.
    assert_eq!(p.fields, json!({"stream": true, "top_p": 0.5}).as_object().unwrap().clone());
    for (body, param) in [
        (json!({"prompt": "x"}), Some("model")),
        (json!({"model": "", "prompt": "x"}), Some("model")),
        (json!({"model": "m"}), Some("prompt")),
        (json!({"model": "m", "prompt": ""}), Some("prompt")),
        (json!({"model": "m", "prompt": [1, 2]}), Some("prompt")),
        (json!({"model": "m", "prompt": ["a", "b"]}), Some("prompt")),
        (json!({"model": "m", "prompt": "x", "stream": 1}), Some("stream")),
        (json!({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}}), Some("stream_options")),
        (json!([1]), None),
    ] {
        let e = parse_json(Endpoint::Completions, body.clone()).unwrap_err();
        assert_eq!((e.error.kind, e.param), (ErrorKind::InvalidArgument, param), "{body}");
    }
    let e = parse(Endpoint::Completions, b"{nope").unwrap_err();
    assert!(e.error.message.contains("not valid JSON"), "{}", e.error.message);
}

#[test]
fn chat_bodies_keep_messages_and_rename_the_token_limit() {
    let p = parse_json(
        Endpoint::Chat,
        json!({"model": "m", "max_tokens": 3, "max_completion_tokens": 9,
        "add_generation_prompt": false, "tools": [{"type": "function"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                     {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
    )
    .unwrap();
    let Prompt::Messages(m) = &p.prompt else { panic!("chat has messages") };
    assert_eq!(m[0].get_attr("content").unwrap().as_str(), Some("a\nb"), "text parts are joined");
    assert_eq!(m[0].get_attr("role").unwrap().as_str(), Some("user"));
    assert_eq!(m[1].get_attr("content").unwrap().kind(), minijinja::value::ValueKind::Seq, "other parts stay");
    assert_eq!(p.fields["max_tokens"], 9, "max_completion_tokens wins");
    assert!(!p.fields.contains_key("max_completion_tokens") && !p.add_generation_prompt);
    assert!(p.tools.is_some());
    for body in [
        json!({"model": "m"}),
        json!({"model": "m", "messages": []}),
        json!({"model": "m", "messages": [1]}),
        json!({"model": "m", "messages": [{"content": "no role"}]}),
    ] {
        assert_eq!(parse_json(Endpoint::Chat, body).unwrap_err().param, Some("messages"));
    }
}

fn fields(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn fields_become_typed_inputs_or_parameters() {
    let mut extra = Parameters::new();
    extra.insert("x-fwd".into(), ParamValue::String("h".into()));
    let f = fields(json!({"temperature": 0.5, "stop": ["a", "b"], "stream": true, "top_p": 1, "seed": 7,
        "logit_bias": {"1": 2}, "echo": false, "frequency_penalty": 0.25}));
    let r = infer_request(&llm_config(0), "llm", "id1", "prompt".into(), f, extra).unwrap();
    assert_eq!((r.model_name.as_str(), r.id.as_str()), ("llm", "id1"));
    let t = |n: &str| r.inputs.iter().find(|t| t.name == n).unwrap();
    assert_eq!((t("text_input").datatype, &t("text_input").shape), (DataType::Bytes, &vec![1]));
    assert_eq!(t("text_input").data.to_host().unwrap(), serialize_bytes(["prompt"]));
    assert_eq!(
        (t("temperature").datatype, t("temperature").data.to_host().unwrap().to_vec()),
        (DataType::Fp32, 0.5f32.to_le_bytes().to_vec())
    );
    assert_eq!((&t("stop").shape, t("stop").data.to_host().unwrap()), (&vec![2], serialize_bytes(["a", "b"])));
    assert_eq!(t("stream").data.to_host().unwrap().to_vec(), vec![1u8]);
    // No max_tokens given: Triton's default, to the model that declares it.
    assert_eq!(t("max_tokens").data.to_host().unwrap().to_vec(), 16i32.to_le_bytes().to_vec());
    let p = &r.parameters;
    assert_eq!(p["top_p"], ParamValue::Int(1));
    assert_eq!(p["seed"], ParamValue::Int(7));
    assert_eq!(p["frequency_penalty"], ParamValue::Double(0.25));
    assert_eq!(p["echo"], ParamValue::Bool(false));
    assert_eq!(p["logit_bias"], ParamValue::String(r#"{"1":2}"#.into()), "objects as JSON text");
    assert_eq!(p["x-fwd"], ParamValue::String("h".into()));
}

#[test]
fn batching_models_get_a_batch_dimension_and_wrong_values_are_invalid() {
    let r = infer_request(&llm_config(4), "llm", "", "p".into(), fields(json!({"max_tokens": 5})), Parameters::new())
        .unwrap();
    assert!(r.inputs.iter().all(|t| t.shape[0] == 1 && t.shape.len() == 2), "{:?}", r.inputs);
    let e =
        infer_request(&llm_config(0), "llm", "", "p".into(), fields(json!({"max_tokens": "many"})), Parameters::new())
            .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("max_tokens") && e.message.contains("INT32"), "{}", e.message);
    let mut cfg = llm_config(0);
    cfg.input.remove(0);
    let e = infer_request(&cfg, "llm", "", "p".into(), Default::default(), Parameters::new()).unwrap_err();
    assert!(e.message.contains("no 'text_input' input"), "{}", e.message);
}

const HF_TEMPLATE: &str = "{{ bos_token }}\n{% for m in messages %}\n  {% if m['role'] == 'robot' %}{{ raise_exception('no robots') }}{% endif %}\n  [{{ m['role'] }}] {{ m['content'].strip() }}{{ eos_token }}\n{% endfor %}\n{% if add_generation_prompt %}[assistant]{% endif %}";

fn folder_with(files: &[(&str, String)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(d.path().join(name), text).unwrap();
    }
    d
}

#[test]
fn tokenizer_config_templates_render_like_transformers() {
    let tok =
        json!({"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false}, "chat_template": HF_TEMPLATE});
    let d = folder_with(&[("tokenizer_config.json", tok.to_string())]);
    let t = template::load(&ModelConfig::default(), Some(d.path()), "m").unwrap();
    let msgs = [jv(json!({"role": "user", "content": " hi "})), jv(json!({"role": "assistant", "content": "yo"}))];
    // What Python's jinja2 renders with transformers' settings (trim_blocks, lstrip_blocks).
    assert_eq!(t.render("m", &msgs, true, None).unwrap(), "<s>\n  [user] hi</s>\n  [assistant] yo</s>\n[assistant]");
    assert_eq!(t.render("m", &msgs[..1], false, None).unwrap(), "<s>\n  [user] hi</s>\n");
    let e = t.render("m", &[jv(json!({"role": "robot", "content": ""}))], true, None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("no robots"), "{}", e.message);
}

#[test]
fn where_templates_come_from() {
    let named = json!({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]});
    let d = folder_with(&[("tokenizer_config.json", named.to_string()), ("chat_template.jinja", "F".into())]);
    let render = |cfg: &ModelConfig, dir: Option<&std::path::Path>| {
        template::load(cfg, dir, "m").and_then(|t| t.render("m", &[], true, None))
    };
    assert_eq!(render(&ModelConfig::default(), Some(d.path())).unwrap(), "D", "the default of named templates");
    let mut cfg = ModelConfig::default();
    cfg.parameters.insert(template::PARAMETER.into(), ModelParameter { string_value: "P{{ bos_token }}".into() });
    let tok = folder_with(&[("tokenizer_config.json", json!({"bos_token": "<b>"}).to_string())]);
    assert_eq!(
        render(&cfg, Some(tok.path())).unwrap(),
        "P<b>",
        "the parameter wins; tokens still come from the folder"
    );
    let file_only = folder_with(&[("chat_template.jinja", "F".into())]);
    assert_eq!(render(&ModelConfig::default(), Some(file_only.path())).unwrap(), "F");
    let e = render(&ModelConfig::default(), None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("has no chat template"), "{}", e.message);
    let broken = folder_with(&[("tokenizer_config.json", "{".into())]);
    assert_eq!(render(&ModelConfig::default(), Some(broken.path())).unwrap_err().kind, ErrorKind::Internal);
    cfg.parameters.insert(template::PARAMETER.into(), ModelParameter { string_value: "{% if %}".into() });
    let e = render(&cfg, None).unwrap_err();
    assert!(e.kind == ErrorKind::Internal && e.message.contains("does not compile"), "{e:?}");
}

#[test]
fn tojson_writes_what_pythons_json_dumps_writes_in_the_clients_key_order() {
    let mut cfg = ModelConfig::default();
    let src = "{{ tools | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ messages[0].content | tojson }}|{{ messages[0] | tojson }}";
    cfg.parameters.insert(template::PARAMETER.into(), ModelParameter { string_value: src.into() });
    let t = template::load(&cfg, None, "m").unwrap();
    let body =
        r#"{"model": "m", "tools": [{"name": "f", "args": [1, 2]}], "messages": [{"role": "u", "content": "<é>"}]}"#;
    let p = parse(Endpoint::Chat, body.as_bytes()).unwrap();
    let Prompt::Messages(m) = &p.prompt else { panic!("chat has messages") };
    let out = t.render("m", m, true, p.tools.as_ref()).unwrap();
    assert_eq!(
        out,
        "[{\"name\": \"f\", \"args\": [1, 2]}]|{\n  \"name\": \"f\",\n  \"args\": [\n    1,\n    2\n  ]\n}|\"<é>\"|{\"role\": \"u\", \"content\": \"<é>\"}"
    );
}

#[test]
fn strftime_now_formats_utc_dates() {
    // 2024-07-26 13:05:09 UTC, a Friday.
    let t = 1_722_000_309;
    assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
    assert_eq!(strftime("%A %a %B %m/%d/%y %H:%M:%S %% %Q", t), "Friday Fri July 07/26/24 13:25:09 % %Q");
    assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
    assert_eq!(strftime("%Y-%m-%d", 951_782_400), "2000-02-29");
}

fn text_response(texts: &[&str], counts: Option<(u32, u32)>) -> InferResponse {
    let mut outputs =
        vec![Tensor::new("text_output", DataType::Bytes, vec![texts.len() as i64], serialize_bytes(texts))];
    if let Some((i, o)) = counts {
        outputs.push(Tensor::new(
            "num_input_tokens",
            DataType::Uint32,
            vec![1],
            Bytes::copy_from_slice(&i.to_le_bytes()),
        ));
        outputs.push(Tensor::new(
            "num_output_tokens",
            DataType::Int64,
            vec![1],
            Bytes::copy_from_slice(&i64::from(o).to_le_bytes()),
        ));
    }
    InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: String::new(),
        outputs,
        parameters: Parameters::new(),
    }
}

#[test]
fn answers_in_openai_form() {
    let meta = Meta { endpoint: Endpoint::Chat, id: "chatcmpl-1".into(), created: 5, model: "m".into() };
    let mut usage = Usage::default();
    let (a, b) = (text_response(&["he", "x"], Some((3, 1))), text_response(&["llo", "y"], Some((3, 2))));
    usage.add(&a);
    usage.add(&b);
    let whole = response::whole(&meta, &["hello".into(), "xy".into()], "length", &usage);
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(
        whole["choices"][1],
        json!({"index": 1, "message": {"role": "assistant", "content": "xy"}, "logprobs": null, "finish_reason": "length"})
    );
    assert_eq!(whole["usage"], json!({"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}));
    assert_eq!(response::texts(&a).unwrap(), vec!["he", "x"]);
    let c = response::chunk(&meta, &["he".into()], None).unwrap();
    assert_eq!(
        (c["object"].as_str(), &c["choices"][0]["delta"]),
        (Some("chat.completion.chunk"), &json!({"content": "he"}))
    );
    assert_eq!(response::chunk(&meta, &[], Some("stop")).unwrap()["choices"][0]["delta"], json!({}));
    assert!(response::chunk(&meta, &[], None).is_none(), "nothing to say, not the end: no chunk");
    let u = response::usage_chunk(&meta, &usage).unwrap();
    assert_eq!((u["choices"].as_array().map(Vec::len), &u["usage"]["total_tokens"]), (Some(0), &json!(6)));
    assert!(response::usage_chunk(&meta, &Usage::default()).is_none(), "no counts from the model: no usage");
    let meta = Meta { endpoint: Endpoint::Completions, ..meta };
    let c = response::chunk(&meta, &[], Some("stop")).unwrap();
    assert_eq!((c["object"].as_str(), &c["choices"][0]["text"]), (Some("text_completion"), &json!("")));
    assert!(response::whole(&meta, &["t".into()], "stop", &Usage::default()).get("usage").is_none());
    assert_eq!(&response::event(&json!({"a": 1}))[..], b"data: {\"a\":1}\n\n");
}

#[test]
fn errors_in_openai_form() {
    let e = unknown_model(Error::not_found("Request for unknown model: 'x'"));
    assert_eq!(e.status(), 404);
    assert_eq!(
        e.body(),
        json!({"error": {"message": "Request for unknown model: 'x'", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}})
    );
    let e = ApiError::from(Error::internal("boom"));
    assert_eq!((e.status(), &e.body()["error"]["type"]), (500, &json!("server_error")));
    assert_eq!(ApiError::from(Error::unavailable("busy")).status(), 503);
    assert!(
        completion_id(Endpoint::Chat).starts_with("chatcmpl-")
            && completion_id(Endpoint::Completions).starts_with("cmpl-")
    );
}
