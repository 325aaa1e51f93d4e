//! Unit tests of `backend/onnx.rs`: loading the library, staging inputs, and reading outputs.

mod library_tests {
    use super::super::*;

    #[test]
    fn versioned_libraries_are_found_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "libonnxruntime.so.1.16.3",
            "libonnxruntime.so.1.9.0",
            "libonnxruntime.so.1.17",
            "libonnxruntime.so.x",
            "other.so.1.2",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let found: Vec<String> = crate::backend::libsearch::libs_in(dir.path(), library::LIB_NAME)[1..]
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(found, ["libonnxruntime.so.1.17", "libonnxruntime.so.1.16.3", "libonnxruntime.so.1.9.0"]);
    }

    #[test]
    fn the_loader_says_why_a_file_is_not_a_library() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libonnxruntime.so");
        std::fs::write(&fake, b"not a library").unwrap();
        let why = dlopen_error(&fake).unwrap();
        assert!(why.starts_with("dlopen failed: ") && why.contains("libonnxruntime.so"), "{why}");
    }
}

mod staging_tests {
    use super::super::*;

    #[test]
    fn staged_bytes_are_aligned_and_the_buffer_is_reused() {
        let mut s = Staging::default();
        // An odd offset into a larger buffer, as a protobuf field sits.
        let src: Vec<u8> = (0..=255u8).cycle().take(4097).collect();
        let p1 = {
            let d = s.fill(&src[1..]);
            assert_eq!(d, &src[1..]);
            assert_eq!(d.as_ptr() as usize % 64, 0);
            d.as_ptr()
        };
        // Same or smaller sizes reuse the allocation.
        let p2 = s.fill(&src[3..100]).as_ptr();
        assert_eq!(p1, p2);
        assert_eq!(s.fill(&src[3..100]), &src[3..100]);
    }

    #[test]
    fn a_huge_staging_buffer_is_given_back() {
        let mut s = Staging::default();
        s.fill(&vec![1u8; STAGING_KEEP_BYTES + 1]);
        s.trim();
        assert!(s.0.is_empty());
        s.fill(&[1, 2, 3]);
        s.trim();
        assert_eq!(s.0.len(), 1);
    }
}

mod output_tests {
    use super::super::*;
    use crate::model_api::{InstanceKind, InstanceSpec};

    /// One backend for the tests of this module: ONNX Runtime allows one environment per process.
    fn backend() -> &'static OnnxBackend {
        static BACKEND: OnceLock<OnnxBackend> = OnceLock::new();
        BACKEND.get_or_init(|| OnnxBackend::new(&BackendConfig::default()))
    }

    /// An instance of an example model, or `None` (with a note) where no ONNX Runtime library is set
    /// up; with ORT_DYLIB_PATH set, as scripts/env.sh and the test command set it, it must load.
    fn example(name: &str) -> Option<Box<dyn ModelInstance>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("model-repos/examples").join(name);
        let text = std::fs::read_to_string(dir.join("config.pbtxt")).unwrap();
        let config = Arc::new(crate::model_config::pbtxt::parse_config(&text, "config.pbtxt").unwrap());
        let ctx =
            ModelContext { name: name.into(), version: 1, config, model_dir: dir.clone(), version_dir: dir.join("1") };
        let spec =
            InstanceSpec { name: format!("{name}_0"), kind: InstanceKind::Cpu, profiles: Vec::new(), dla_core: None };
        match backend().create_instance(&ctx, &spec) {
            Ok(i) => Some(i),
            Err(e) if std::env::var_os("ORT_DYLIB_PATH").is_none() => {
                eprintln!("skipped: no ONNX Runtime library ({e}); source scripts/env.sh");
                None
            }
            Err(e) => panic!("{name} did not load with ORT_DYLIB_PATH set: {e}"),
        }
    }

    /// `values` as a [N, 1] tensor whose bytes start one byte into their buffer, so the run reads
    /// them from the instance's staging buffer, as gRPC's misaligned raw contents are read.
    fn misaligned<T: bytemuck::Pod>(name: &str, dt: DataType, values: &[T]) -> Tensor {
        let mut buf = vec![0u8];
        buf.extend_from_slice(bytemuck::cast_slice(values));
        Tensor::new(name, dt, vec![values.len() as i64, 1], Bytes::from(buf).slice(1..))
    }

    fn run(inst: &mut dyn ModelInstance, corrid: u64, input: i32) -> Vec<Tensor> {
        let req = ExecRequest {
            inputs: vec![
                misaligned("INPUT", DataType::Int32, &[input, input + 1]),
                misaligned("START", DataType::Int32, &[1i32, 1]),
                misaligned("END", DataType::Int32, &[0i32, 0]),
                misaligned("READY", DataType::Fp32, &[1f32, 1.0]),
                misaligned("CORRID", DataType::Uint64, &[corrid, corrid + 1]),
                misaligned("ACC_IN", DataType::Int32, &[0i32, 0]),
            ],
            outputs: vec!["OUTPUT".into(), "CORRID_OUT".into(), "OUTPUT".into()],
            ..Default::default()
        };
        inst.execute(&req).unwrap().outputs
    }

    fn values<T: bytemuck::Pod>(t: &Tensor) -> Vec<T> {
        bytemuck::pod_collect_to_vec(t.data.as_host().unwrap())
    }

    #[test]
    fn outputs_outlive_the_run_and_the_instance_and_never_share_an_inputs_memory() {
        let Some(mut inst) = example("sequence_accumulate") else { return };
        let first = run(inst.as_mut(), 7, 10);
        // The next run overwrites the staging buffers and may reuse ONNX Runtime's memory; what the
        // first run returned must not change. CORRID_OUT is CORRID through an Identity node, an
        // output ONNX Runtime may place over the input's memory.
        let second = run(inst.as_mut(), 100, 50);
        drop(inst);
        assert_eq!(first.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["OUTPUT", "CORRID_OUT", "OUTPUT"]);
        assert_eq!(values::<i32>(&first[0]), [10, 11]);
        assert_eq!(values::<u64>(&first[1]), [7, 8]);
        assert_eq!(values::<i32>(&first[2]), [10, 11]);
        assert_eq!(values::<i32>(&second[0]), [50, 51]);
        assert_eq!(values::<u64>(&second[1]), [100, 101]);
    }

    /// A model whose one output is its input itself (no node at all): `Y` is graph input and graph
    /// output, FP32 [N, 1]. ONNX Runtime can hand such an output back over the input's memory.
    fn passthrough(dir: &Path) -> Box<dyn ModelInstance> {
        use crate::proto::onnx::{
            tensor_shape_proto, type_proto, GraphProto, ModelProto, TensorShapeProto, TypeProto, ValueInfoProto,
        };
        use prost::Message as _;
        let dim = |d: tensor_shape_proto::dimension::Value| tensor_shape_proto::Dimension { value: Some(d) };
        let y = ValueInfoProto {
            name: "Y".into(),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: 1, // FLOAT
                    shape: Some(TensorShapeProto {
                        dim: vec![
                            dim(tensor_shape_proto::dimension::Value::DimParam("N".into())),
                            dim(tensor_shape_proto::dimension::Value::DimValue(1)),
                        ],
                    }),
                })),
            }),
        };
        let model = ModelProto {
            ir_version: 8,
            graph: Some(GraphProto { initializer: Vec::new(), input: vec![y.clone()], output: vec![y] }),
        };
        let mut bytes = model.encode_to_vec();
        // opset_import (field 8) { version (2): 13 }, which this schema does not carry.
        bytes.extend_from_slice(&[0x42, 0x02, 0x10, 0x0d]);
        std::fs::create_dir_all(dir.join("1")).unwrap();
        std::fs::write(dir.join("1/model.onnx"), bytes).unwrap();
        let config = Arc::new(
            crate::model_config::pbtxt::parse_config(
                "name: \"passthrough\"\nbackend: \"onnxruntime\"\nmax_batch_size: 0\n\
                 input [ { name: \"Y\" data_type: TYPE_FP32 dims: [ -1, 1 ] } ]\n\
                 output [ { name: \"Y\" data_type: TYPE_FP32 dims: [ -1, 1 ] } ]\n",
                "config.pbtxt",
            )
            .unwrap(),
        );
        let ctx = ModelContext {
            name: "passthrough".into(),
            version: 1,
            config,
            model_dir: dir.to_path_buf(),
            version_dir: dir.join("1"),
        };
        let spec = InstanceSpec {
            name: "passthrough_0".into(),
            kind: InstanceKind::Cpu,
            profiles: Vec::new(),
            dla_core: None,
        };
        backend().create_instance(&ctx, &spec).unwrap()
    }

    #[test]
    fn an_output_that_is_an_input_is_copied_out_of_the_inputs_memory() {
        if example("simple").is_none() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut inst = passthrough(dir.path());
        let run = |inst: &mut Box<dyn ModelInstance>, v: f32| {
            let req = ExecRequest {
                inputs: vec![misaligned("Y", DataType::Fp32, &[v, v + 1.0])],
                outputs: vec!["Y".into()],
                ..Default::default()
            };
            inst.execute(&req).unwrap().outputs
        };
        let first = run(&mut inst, 1.0);
        let second = run(&mut inst, 5.0);
        assert_eq!(values::<f32>(&first[0]), [1.0, 2.0]);
        assert_eq!(values::<f32>(&second[0]), [5.0, 6.0]);
    }

    #[test]
    fn overlap_is_any_shared_byte() {
        let buf = [0u8; 64];
        assert!(overlaps(&buf[10..20], &[&buf[19..30]]));
        assert!(!overlaps(&buf[10..20], &[&buf[20..30]]));
        assert!(overlaps(&buf[10..20], &[&buf[..5], &buf[..]]));
        assert!(!overlaps(&buf[10..10], &[&buf[..]]), "no bytes share nothing");
    }
}

#[test]
fn global_thread_pool_settings_are_read_as_tritons_backend_reads_them() {
    use super::{global_pool, BackendConfig, GlobalPool};
    let parse = |v: &[&str]| {
        let values: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        global_pool(&BackendConfig::parse(&values).unwrap())
    };
    assert_eq!(parse(&[]), Ok(None));
    assert_eq!(parse(&["onnxruntime,intra_op_thread_count=2"]), Ok(None));
    assert_eq!(
        parse(&[
            "onnxruntime,enable-global-threadpool=1",
            "onnxruntime,intra_op_thread_count=2",
            "onnxruntime,inter_op_thread_count=3"
        ]),
        Ok(Some(GlobalPool { intra: 2, inter: 3 }))
    );
    assert_eq!(parse(&["onnxruntime,enable-global-threadpool=true"]), Ok(Some(GlobalPool { intra: 0, inter: 0 })));
    let e = parse(&["onnxruntime,enable-global-threadpool=sure"]).unwrap_err();
    assert!(e.contains("enable-global-threadpool=sure"), "{e}");
    let e = parse(&["onnxruntime,enable-global-threadpool=1", "onnxruntime,intra_op_thread_count=x"]).unwrap_err();
    assert!(e.contains("intra_op_thread_count=x"), "{e}");
}
