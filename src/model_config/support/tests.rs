use super::*;
use crate::proto::inference::{ModelInstanceGroup, ModelOptimizationPolicy};
use crate::proto::DESCRIPTOR_POOL;

/// Every (message, field) of model_config.proto, read from the descriptors embedded by build.rs.
fn proto_fields() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in DESCRIPTOR_POOL.all_messages() {
        if m.parent_file().name() != "model_config.proto" || m.is_map_entry() {
            continue;
        }
        let name = m.full_name().strip_prefix("inference.").unwrap_or(m.full_name()).to_string();
        for f in m.fields() {
            out.push((name.clone(), f.name().to_string()));
        }
    }
    out
}

#[test]
fn every_field_of_model_config_proto_is_implemented_or_refused() {
    let fields = proto_fields();
    assert!(fields.len() > 150, "only {} fields found; is model_config.proto embedded?", fields.len());
    let unlisted: Vec<String> =
        fields.iter().filter(|(m, f)| support(m, f).is_none()).map(|(m, f)| format!("{m}.{f}")).collect();
    assert!(unlisted.is_empty(), "fields with no entry in model_config::support: {unlisted:?}");
}

#[test]
fn every_table_entry_names_a_field_of_the_proto() {
    let fields: Vec<String> = proto_fields().into_iter().map(|(m, f)| format!("{m}.{f}")).collect();
    let listed = IMPLEMENTED
        .iter()
        .flat_map(|(m, fs)| fs.iter().map(move |f| format!("{m}.{f}")))
        .chain(REFUSED.iter().map(|(f, _)| f.to_string()));
    for entry in listed {
        assert!(fields.contains(&entry), "'{entry}' is in the table but not in model_config.proto");
    }
}

fn minimal() -> ModelConfig {
    ModelConfig { name: "m".into(), backend: "python".into(), ..Default::default() }
}

#[test]
fn a_refused_field_fails_the_check_naming_its_path() {
    let mut cfg = minimal();
    cfg.instance_group.push(ModelInstanceGroup { passive: true, ..Default::default() });
    let err = check(&cfg).unwrap_err();
    assert!(err.message.contains("field 'instance_group.passive'"), "{}", err.message);
    assert!(err.message.contains("passive instances"), "{}", err.message);
}

#[test]
fn a_nested_refused_field_is_found() {
    let mut cfg = minimal();
    let cuda = crate::proto::inference::model_optimization_policy::Cuda { graphs: true, ..Default::default() };
    cfg.optimization = Some(ModelOptimizationPolicy { cuda: Some(cuda), ..Default::default() });
    let err = check(&cfg).unwrap_err();
    assert!(err.message.contains("field 'optimization.cuda.graphs'"), "{}", err.message);
}

#[test]
fn implemented_and_empty_fields_pass() {
    let mut cfg = minimal();
    cfg.max_batch_size = 4;
    cfg.optimization = Some(ModelOptimizationPolicy { cuda: Some(Default::default()), ..Default::default() });
    cfg.instance_group.push(ModelInstanceGroup { count: 2, ..Default::default() });
    check(&cfg).unwrap();
}

#[test]
fn secondary_devices_are_for_tensorrt_plans_only() {
    use crate::proto::inference::model_instance_group::SecondaryDevice;
    let mut cfg = minimal();
    let dla = SecondaryDevice { kind: 0, device_id: 1 };
    cfg.instance_group.push(ModelInstanceGroup { secondary_devices: vec![dla], ..Default::default() });
    let err = check(&cfg).unwrap_err();
    assert!(err.message.contains("field 'instance_group.secondary_devices'"), "{}", err.message);
    assert!(err.message.contains("python backend"), "{}", err.message);
    cfg.backend = "tensorrt".into();
    check(&cfg).unwrap();
    cfg.instance_group[0].secondary_devices.push(dla);
    assert!(check(&cfg).unwrap_err().message.contains("one DLA core"));
}

#[test]
fn graph_level_is_for_onnxruntime_models_only() {
    use crate::proto::inference::model_optimization_policy::Graph;
    let mut cfg = minimal();
    cfg.optimization = Some(ModelOptimizationPolicy { graph: Some(Graph { level: 1 }), ..Default::default() });
    let err = check(&cfg).unwrap_err();
    assert!(err.message.contains("field 'optimization.graph.level'"), "{}", err.message);
    cfg.backend = "onnxruntime".into();
    check(&cfg).unwrap();
}

#[test]
fn model_metrics_set_only_the_first_response_histogram() {
    use crate::proto::inference::model_metrics::metric_control::{HistogramOptions, MetricIdentifier, MetricOptions};
    use crate::proto::inference::model_metrics::MetricControl;
    use crate::proto::inference::ModelMetrics;
    let control = |family: &str, buckets: Vec<f64>| MetricControl {
        metric_identifier: Some(MetricIdentifier { family: family.into() }),
        metric_options: Some(MetricOptions::HistogramOptions(HistogramOptions { buckets })),
    };
    let mut cfg = minimal();
    cfg.model_metrics = Some(ModelMetrics {
        metric_control: vec![control("nv_inference_first_response_histogram_ms", vec![1.0, 2.5])],
    });
    check(&cfg).unwrap();
    cfg.model_metrics = Some(ModelMetrics { metric_control: vec![control("nv_inference_count", vec![1.0])] });
    let err = check(&cfg).unwrap_err();
    assert!(
        err.message.contains("model_metrics.metric_control") && err.message.contains("nv_inference_count"),
        "{}",
        err.message
    );
    cfg.model_metrics =
        Some(ModelMetrics { metric_control: vec![control("nv_inference_first_response_histogram_ms", vec![])] });
    assert!(check(&cfg).is_err());
}
