//! Unit tests of `storage/listing.rs`.

use super::*;

fn contents(key: &str) -> String {
    format!("<Contents><Key>{key}</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>")
}

#[test]
fn cuts_out_only_the_entries_no_path_may_hold() {
    let body = format!(
            "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Prefix>m/</Prefix>{}{}{}{}{}{}<NextContinuationToken>t</NextContinuationToken></ListBucketResult>",
            contents("m/a/config.pbtxt"),
            contents("m/a/../../../x.txt"),
            contents("m/a//b"),
            contents("m/a/tab\there"),
            contents("m/a/&amp;.txt"),
            contents("m/a/./y"),
        );
    let (kept, skipped) = filter_listing(body.as_bytes(), S3).unwrap();
    let kept = String::from_utf8(kept).unwrap();
    assert_eq!(
            kept,
            format!(
                "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Prefix>m/</Prefix>{}{}<NextContinuationToken>t</NextContinuationToken></ListBucketResult>",
                contents("m/a/config.pbtxt"),
                contents("m/a/&amp;.txt")
            )
        );
    let keys: Vec<&str> = skipped.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, vec!["m/a/../../../x.txt", "m/a//b", "m/a/tab\there", "m/a/./y"]);
    assert!(skipped[0].why.contains("'..'") && skipped[1].why.contains("empty") && skipped[2].why.contains("control"));
}

#[test]
fn reads_azure_listings_and_escaped_keys() {
    let body = "<EnumerationResults><Blobs><Blob><Name>r/m/a&#9;b</Name><Properties><Content-Length>1</Content-Length></Properties></Blob><Blob><Name>r/m/ok</Name><Properties/></Blob><BlobPrefix><Name>r/../</Name></BlobPrefix></Blobs><NextMarker/></EnumerationResults>";
    let (kept, skipped) = filter_listing(body.as_bytes(), AZURE).unwrap();
    assert_eq!(
            String::from_utf8(kept).unwrap(),
            "<EnumerationResults><Blobs><Blob><Name>r/m/ok</Name><Properties/></Blob></Blobs><NextMarker/></EnumerationResults>"
        );
    assert_eq!(skipped.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), vec!["r/m/a\tb", "r/../"]);
}

#[test]
fn leaves_what_it_cannot_read_to_object_store() {
    assert!(filter_listing(b"<a><Contents><Key>x</Key></b>", S3).is_none());
    let (kept, skipped) = filter_listing(b"not xml at all", S3).unwrap();
    assert_eq!((kept.as_slice(), skipped.len()), (&b"not xml at all"[..], 0));
}

#[test]
fn names_why_a_key_is_refused() {
    assert_eq!(key_problem("m/a/config.pbtxt"), None);
    assert_eq!(key_problem("m/a/notes~1.txt"), None);
    assert!(key_problem("m/../x").unwrap().contains("'..'"));
    assert!(key_problem("m//x").unwrap().contains("empty"));
    assert!(key_problem("m/\u{1}").unwrap().contains("control"));
}
