use super::*;
use crate::proto::inference::{ModelInput, ModelOutput};

fn io(name: &str, input: bool, dims: &[i64]) -> IoDesc {
    IoDesc {
        name: name.into(),
        input,
        trt_dtype: 0,
        dims: dims.to_vec(),
        shape_tensor: false,
        host: false,
        not_linear: false,
    }
}

fn range(min: &[i64], opt: &[i64], max: &[i64]) -> Option<Range> {
    Some(Range { min: min.to_vec(), opt: opt.to_vec(), max: max.to_vec() })
}

/// Two inputs [-1,4] and [-1,4], one output; profile 0 takes batches 1-8 (INPUT1 only up to 6),
/// profile 1 batches 9-32.
fn dynamic() -> EngineDesc {
    EngineDesc {
        io: vec![io("INPUT0", true, &[-1, 4]), io("INPUT1", true, &[-1, 4]), io("OUTPUT0", false, &[-1, 4])],
        profiles: vec![
            vec![range(&[1, 4], &[4, 4], &[8, 4]), range(&[1, 4], &[4, 4], &[6, 4]), None],
            vec![range(&[9, 4], &[16, 4], &[32, 4]), range(&[9, 4], &[16, 4], &[32, 4]), None],
        ],
        implicit_batch: false,
    }
}

fn cfg(name: &str, max_batch_size: i32) -> ModelConfig {
    ModelConfig { name: name.into(), backend: "tensorrt".into(), max_batch_size, ..Default::default() }
}

fn tensor_in(name: &str, dims: &[i64]) -> ModelInput {
    ModelInput { name: name.into(), data_type: DataType::Fp32.to_config(), dims: dims.to_vec(), ..Default::default() }
}

fn tensor_out(name: &str, dims: &[i64]) -> ModelOutput {
    ModelOutput { name: name.into(), data_type: DataType::Fp32.to_config(), dims: dims.to_vec(), ..Default::default() }
}

#[test]
fn tensorrt_types_map_to_triton_types() {
    assert_eq!(from_trt_dtype(0), Some(DataType::Fp32));
    assert_eq!(from_trt_dtype(1), Some(DataType::Fp16));
    assert_eq!(from_trt_dtype(2), Some(DataType::Int8));
    assert_eq!(from_trt_dtype(3), Some(DataType::Int32));
    assert_eq!(from_trt_dtype(4), Some(DataType::Bool));
    assert_eq!(from_trt_dtype(5), Some(DataType::Uint8));
    assert_eq!(from_trt_dtype(7), Some(DataType::Bf16));
    assert_eq!(from_trt_dtype(8), Some(DataType::Int64));
    assert_eq!(from_trt_dtype(6), None); // FP8
    assert_eq!(from_trt_dtype(9), None); // INT4
}

#[test]
fn batch_limits_come_from_the_profiles() {
    let d = dynamic();
    assert!(d.can_batch());
    assert_eq!(d.profile_max_batch(0), Some(6), "the smallest maximum over the inputs");
    assert_eq!(d.profile_max_batch(1), Some(32));
    assert_eq!(d.max_batch(&[]), Some(32));
    assert_eq!(d.max_batch(&[0]), Some(6));
}

#[test]
fn auto_complete_fills_tensors_and_max_batch_size_from_the_engine() {
    let mut c = cfg("m", 0);
    c.backend.clear();
    auto_complete(&mut c, &dynamic());
    assert_eq!(c.platform, "tensorrt_plan");
    assert_eq!(c.backend, "tensorrt");
    assert_eq!(c.max_batch_size, 32);
    assert_eq!(
        c.input.iter().map(|t| (t.name.as_str(), t.dims.clone())).collect::<Vec<_>>(),
        vec![("INPUT0", vec![4]), ("INPUT1", vec![4])]
    );
    assert_eq!(c.output.len(), 1);
    assert_eq!(c.output[0].dims, vec![4]);
    assert_eq!(c.output[0].data_type, DataType::Fp32.to_config());

    // A static engine cannot batch: max_batch_size stays 0 and dims keep their full rank.
    let fixed = EngineDesc {
        io: vec![io("X", true, &[1, 3, 8, 8]), io("Y", false, &[1, 10])],
        profiles: vec![],
        implicit_batch: false,
    };
    let mut c = cfg("s", 0);
    auto_complete(&mut c, &fixed);
    assert_eq!(c.max_batch_size, 0);
    assert_eq!(c.input[0].dims, vec![1, 3, 8, 8]);
    assert_eq!(c.output[0].dims, vec![1, 10]);

    // A configured max_batch_size is kept.
    let mut c = cfg("m", 4);
    auto_complete(&mut c, &dynamic());
    assert_eq!(c.max_batch_size, 4);
}

#[test]
fn checks_refuse_what_cannot_be_served() {
    let mut good = cfg("m", 6);
    good.input = vec![tensor_in("INPUT0", &[4]), tensor_in("INPUT1", &[4])];
    good.output = vec![tensor_out("OUTPUT0", &[4])];
    check(&good, &dynamic(), &[0, 1]).expect("valid");

    // max_batch_size beyond what the instance's profiles take.
    let mut c = good.clone();
    c.max_batch_size = 7;
    let e = check(&c, &dynamic(), &[0]).unwrap_err();
    assert!(e.message.contains("max_batch_size 7 is larger than the 6"), "{}", e.message);
    check(&c, &dynamic(), &[0, 1]).expect("profile 1 takes 32");

    // A configured tensor the engine lacks, or of another type.
    let mut c = good.clone();
    c.input[1].name = "OTHER".into();
    assert!(check(&c, &dynamic(), &[0]).is_err());
    let mut c = good.clone();
    c.input[0].data_type = DataType::Int32.to_config();
    let e = check(&c, &dynamic(), &[0]).unwrap_err();
    assert!(e.message.contains("INPUT0"), "{}", e.message);

    // Batching without a dynamic first dimension.
    let fixed = EngineDesc {
        io: vec![io("X", true, &[1, 4]), io("Y", false, &[1, 4])],
        profiles: vec![],
        implicit_batch: false,
    };
    let mut c = cfg("f", 2);
    c.input = vec![tensor_in("X", &[4])];
    c.output = vec![tensor_out("Y", &[4])];
    let e = check(&c, &fixed, &[0]).unwrap_err();
    assert!(e.message.contains("variable batch dimension"), "{}", e.message);

    // Shape tensors, types without a Triton equivalent, implicit batch.
    let mut d = dynamic();
    d.io[1].shape_tensor = true;
    assert!(check(&good, &d, &[0]).unwrap_err().message.contains("shape tensor"));
    let mut d = dynamic();
    d.io[2].trt_dtype = 6;
    assert!(check(&good, &d, &[0]).unwrap_err().message.contains("no Triton equivalent"));
    let mut d = dynamic();
    d.implicit_batch = true;
    assert!(check(&good, &d, &[0]).unwrap_err().message.contains("implicit batch"));
    let mut d = dynamic();
    d.io[0].not_linear = true;
    assert!(check(&good, &d, &[0]).unwrap_err().message.contains("vectorized"));
}

#[test]
fn instance_groups_pick_profiles_by_number() {
    let d = dynamic();
    assert_eq!(instance_profiles(&d, "m", &[]).unwrap(), vec![0, 1]);
    assert_eq!(instance_profiles(&d, "m", &["1".into()]).unwrap(), vec![1]);
    assert_eq!(instance_profiles(&d, "m", &["1".into(), "0".into()]).unwrap(), vec![1, 0]);
    let e = instance_profiles(&d, "m", &["2".into()]).unwrap_err();
    assert!(e.message.contains("profile '2' does not exist") && e.message.contains("0 to 1"), "{}", e.message);
    assert!(instance_profiles(&d, "m", &["x".into()]).is_err());
}

#[test]
fn the_first_profile_that_fits_every_input_serves_the_request() {
    let d = dynamic();
    let s = |b: i64| vec![b, 4];
    let (a, b) = (s(4), s(4));
    assert_eq!(select_profile(&d, &[0, 1], &[(0, &a), (1, &b)]).unwrap(), 0);
    // INPUT1's batch of 7 is beyond profile 0 (6): profile 1 does not start below 9, so nothing fits.
    let (a, b) = (s(7), s(7));
    let e = select_profile(&d, &[0, 1], &[(0, &a), (1, &b)]).unwrap_err();
    assert!(e.message.contains("'INPUT1'") && e.message.contains("[7, 4]"), "{}", e.message);
    assert!(e.message.contains("profile 0: [1, 4] to [6, 4]"), "{}", e.message);
    let (a, b) = (s(16), s(16));
    assert_eq!(select_profile(&d, &[0, 1], &[(0, &a), (1, &b)]).unwrap(), 1);
    // An instance limited to profile 0 cannot take 16.
    assert!(select_profile(&d, &[0], &[(0, &a), (1, &b)]).is_err());
    // The order of the group's list decides between profiles that both fit.
    let mut both = dynamic();
    both.profiles[1] = both.profiles[0].clone();
    let (a, b) = (s(2), s(2));
    assert_eq!(select_profile(&both, &[1, 0], &[(0, &a), (1, &b)]).unwrap(), 1);
    // A wrong inner dimension fits no profile.
    let (a, b) = (vec![2, 5], s(2));
    assert!(select_profile(&d, &[0, 1], &[(0, &a), (1, &b)]).is_err());
}

#[test]
fn implicit_state_tensors_need_no_configured_inputs_or_outputs() {
    use crate::proto::inference::model_config::SchedulingChoice;
    use crate::proto::inference::model_sequence_batching::State;
    use crate::proto::inference::ModelSequenceBatching;
    // An engine with a state input and output beside its data tensors, as the sequence batcher feeds
    // ONNX models: the state pair is the server's business, so the configuration lists only the data.
    let d = EngineDesc {
        io: vec![
            io("INPUT", true, &[-1, 4]),
            io("STATE_IN", true, &[-1, 4]),
            io("OUTPUT", false, &[-1, 4]),
            io("STATE_OUT", false, &[-1, 4]),
        ],
        profiles: vec![vec![range(&[1, 4], &[1, 4], &[4, 4]), range(&[1, 4], &[1, 4], &[4, 4]), None, None]],
        implicit_batch: false,
    };
    let mut c = cfg("acc", 4);
    c.input = vec![tensor_in("INPUT", &[4])];
    c.output = vec![tensor_out("OUTPUT", &[4])];
    c.scheduling_choice = Some(SchedulingChoice::SequenceBatching(ModelSequenceBatching {
        state: vec![State {
            input_name: "STATE_IN".into(),
            output_name: "STATE_OUT".into(),
            data_type: DataType::Fp32.to_config(),
            dims: vec![4],
            ..Default::default()
        }],
        ..Default::default()
    }));
    check(&c, &d, &[0]).expect("state tensors are fed by the sequence batcher");
    // Auto-complete leaves them out too.
    let mut bare = cfg("acc", 0);
    bare.scheduling_choice = c.scheduling_choice.clone();
    auto_complete(&mut bare, &d);
    assert_eq!(bare.input.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["INPUT"]);
    assert_eq!(bare.output.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["OUTPUT"]);
}

#[test]
fn instances_are_assigned_one_profile_of_each_kind_preferring_free_ones() {
    let r = |lo: i64, hi: i64| Some(Range { min: vec![lo, 4], opt: vec![lo, 4], max: vec![hi, 4] });
    let io = vec![IoDesc {
        name: "X".into(),
        input: true,
        trt_dtype: 0,
        dims: vec![-1, 4],
        shape_tensor: false,
        host: false,
        not_linear: false,
    }];
    // Profiles 0-2 are alike (batch 1-8), 3 serves large batches.
    let desc = EngineDesc {
        io,
        profiles: vec![vec![r(1, 8)], vec![r(1, 8)], vec![r(1, 8)], vec![r(9, 64)]],
        implicit_batch: false,
    };
    let all = [0, 1, 2, 3];
    assert_eq!(assign_profiles(&desc, &all, &[0, 0, 0, 0]), vec![0, 3]);
    assert_eq!(assign_profiles(&desc, &all, &[1, 0, 0, 1]), vec![1, 3]);
    assert_eq!(assign_profiles(&desc, &all, &[1, 1, 0, 1]), vec![2, 3]);
    // Nothing free: the least held is shared.
    assert_eq!(assign_profiles(&desc, &all, &[2, 1, 1, 3]), vec![1, 3]);
    // An instance_group's own list is honoured, in its order.
    assert_eq!(assign_profiles(&desc, &[3, 2], &[0, 0, 0, 0]), vec![3, 2]);
    assert_eq!(assign_profiles(&desc, &[2, 1], &[0, 0, 1, 0]), vec![1]);
    // One profile for everyone.
    let one = EngineDesc { profiles: vec![vec![r(1, 8)]], ..desc.clone() };
    assert_eq!(assign_profiles(&one, &[0], &[5]), vec![0]);
}
