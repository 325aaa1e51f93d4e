//! Unit tests of `tensor/datatype.rs`.

use super::*;

#[test]
fn datatype_names_round_trip() {
    for d in DataType::ALL {
        assert_eq!(DataType::parse(d.as_str()), Some(d));
        assert_eq!(DataType::from_config(d.to_config()), Some(d));
    }
    assert_eq!(DataType::parse("FLOAT"), None);
    assert_eq!(DataType::from_config(0), None);
}

#[test]
fn samples_are_plausible_values_never_subnormal_floats() {
    let mut state = 7u32;
    for _ in 0..1000 {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let mut b = [0u8; 8];
        DataType::Fp32.write_sample(state, &mut b[..4]);
        let f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        assert!((0.0..1.0).contains(&f) && (f == 0.0 || f.is_normal()), "{f}");
        DataType::Fp64.write_sample(state, &mut b);
        let d = f64::from_le_bytes(b);
        assert!((0.0..1.0).contains(&d) && (d == 0.0 || d.is_normal()), "{d}");
        DataType::Fp16.write_sample(state, &mut b[..2]);
        let h = half::f16::from_le_bytes([b[0], b[1]]);
        assert!(h.is_finite() && h >= half::f16::ZERO && h <= half::f16::ONE, "{h}");
        DataType::Int32.write_sample(state, &mut b[..4]);
        assert!(i32::from_le_bytes([b[0], b[1], b[2], b[3]]) < 32);
        DataType::Bool.write_sample(state, &mut b[..1]);
        assert!(b[0] <= 1);
    }
    // Too short a buffer is left alone rather than a panic.
    let mut short = [9u8; 2];
    DataType::Fp32.write_sample(1 << 20, &mut short);
    assert_eq!(short, [9, 9]);
}
