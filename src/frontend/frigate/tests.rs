//! Unit tests of `frontend/frigate/mod.rs`.

use super::*;

#[test]
fn delimiters_of_req_and_dealer_peers() {
    let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
    let req = [b(""), b("h"), b("t")];
    let (delimiter, payload) = split_delimiter(&req).unwrap();
    assert_eq!((delimiter.len(), payload), (1, &[b("h"), b("t")][..]));
    let dealer = [b("h")];
    let (delimiter, payload) = split_delimiter(&dealer).unwrap();
    assert_eq!((delimiter.len(), payload), (0, &[b("h")][..]));
    assert!(split_delimiter(&[]).is_none());
}

#[test]
fn rows_are_class_score_then_y_x() {
    let r = rows(&[NormBox { class: 2, score: 0.5, y_min: 0.1, x_min: 0.2, y_max: 0.3, x_max: 0.4 }]);
    assert_eq!(r, vec![[2.0, 0.5, 0.1, 0.2, 0.3, 0.4]]);
}
