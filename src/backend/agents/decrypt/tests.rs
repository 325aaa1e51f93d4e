//! Unit tests of `backend/agents/decrypt.rs`.

use super::*;

/// Whether a file starts with the format's magic.
fn is_encrypted(path: &Path) -> bool {
    std::fs::read(path).unwrap().starts_with(MAGIC)
}

fn key(dir: &Path, bytes: &[u8]) -> PathBuf {
    let p = dir.join("key");
    std::fs::write(&p, bytes).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn round_trip(k: &Key, data: &[u8], chunk: u32) -> Vec<u8> {
    let mut sealed = Vec::new();
    encrypt(k, chunk, Path::new("1/f"), &mut &data[..], &mut sealed).unwrap();
    let mut out = Vec::new();
    decrypt(k, Path::new("1/f"), &mut &sealed[..], &mut out).unwrap();
    out
}

#[test]
fn round_trips_at_every_chunk_boundary() {
    let k = Key([7; 32]);
    let chunk = MIN_CHUNK as usize;
    for len in [0, 1, chunk - 1, chunk, chunk + 1, 3 * chunk, 3 * chunk + 5] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        assert_eq!(round_trip(&k, &data, MIN_CHUNK), data, "length {len}");
    }
}

#[test]
fn wrong_key_tampering_and_truncation_fail() {
    let k = Key([1; 32]);
    let data = vec![5u8; 3 * MIN_CHUNK as usize];
    let mut sealed = Vec::new();
    encrypt(&k, MIN_CHUNK, Path::new("1/f"), &mut &data[..], &mut sealed).unwrap();
    let fails_at =
        |k: &Key, rel: &str, bytes: &[u8]| decrypt(k, Path::new(rel), &mut &bytes[..], &mut Vec::new()).unwrap_err();
    let fails = |k: &Key, bytes: &[u8]| fails_at(k, "1/f", bytes).message;
    assert!(fails(&Key([2; 32]), &sealed).contains("authentication failed"));
    let mut tampered = sealed.clone();
    let at = tampered.len() - 1;
    tampered[at] ^= 1;
    assert!(fails(&k, &tampered).contains("authentication failed"), "the last tag");
    let mut header = sealed.clone();
    header[12] ^= 1;
    assert!(fails(&k, &header).contains("authentication failed"), "the nonce prefix");
    // Cut at a chunk boundary: the remaining chunks are whole, but none is sealed as the last.
    let boundary = HEADER_LEN + 2 * (MIN_CHUNK as usize + TAG_LEN);
    assert!(fails(&k, &sealed[..boundary]).contains("authentication failed"));
    assert!(fails(&k, &sealed[..sealed.len() - 7]).contains("authentication failed"));
    assert!(fails(&k, b"plain text").contains("not a file encrypted"));
    assert!(fails(&k, b"").contains("'1/f' is not a file encrypted by tritonrs encrypt-model (it is empty)"));
    // The same bytes are not a valid file at another path: a file cannot stand in for another.
    let e = fails_at(&k, "1/g", &sealed).message;
    assert!(e.contains("'1/g'") && e.contains("authentication failed"), "{e}");
    assert!(fails_at(&k, "2/f", &sealed).message.contains("authentication failed"));
    assert!(fails_at(&k, "f", &sealed).message.contains("authentication failed"));
    // Any bit of the magic.
    for bit in 0..64 {
        let mut m = sealed.clone();
        m[bit / 8] ^= 1 << (bit % 8);
        let e = fails(&k, &m);
        assert!(e.contains("not a file encrypted") || e.contains("format version"), "bit {bit}: {e}");
    }
    // A file of format version 1 (the header alone authenticated) is refused, saying what to do.
    let mut v1 = sealed.clone();
    v1[7] = 1;
    let e = fails(&k, &v1);
    assert!(e.contains("format version 1") && e.contains("tritonrs encrypt-model"), "{e}");
}

#[test]
fn key_files_must_be_private_and_the_right_size() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read_key(&key(dir.path(), &[9; 32])).unwrap().0, [9; 32]);
    let hex_key = format!("{}\n", "ab".repeat(32));
    assert_eq!(read_key(&key(dir.path(), hex_key.as_bytes())).unwrap().0, [0xab; 32]);
    let e = read_key(&key(dir.path(), &[9; 31])).unwrap_err();
    assert!(e.message.contains("31 bytes"), "{}", e.message);
    let p = key(dir.path(), &[9; 32]);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(read_key(&p).unwrap_err().message.contains("chmod 600"));
    assert!(read_key(&dir.path().join("none")).is_err());
}

#[test]
fn an_agent_decrypts_into_a_private_folder_and_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("plain");
    std::fs::create_dir_all(src.join("1")).unwrap();
    std::fs::write(src.join("config.pbtxt"), b"backend: \"onnxruntime\"").unwrap();
    std::fs::write(src.join("1/model.onnx"), vec![3u8; 10_000]).unwrap();
    let kp = key(dir.path(), &[4; 32]);
    let enc = dir.path().join("enc");
    assert_eq!(encrypt_model(&src, &enc, &read_key(&kp).unwrap(), MIN_CHUNK).unwrap(), 1);
    assert!(is_encrypted(&enc.join("1/model.onnx")));
    assert!(!is_encrypted(&enc.join("config.pbtxt")));
    assert!(encrypt_model(&src, &enc, &read_key(&kp).unwrap(), MIN_CHUNK).is_err(), "dst exists");

    let work = dir.path().join("work");
    let uid = rustix::process::geteuid().as_raw();
    let own = work.join(format!("tritonrs-decrypt-{uid}"));
    // A folder left by a process that is gone is removed from the agent's own folder when the
    // agent starts; a folder of that form outside it is another program's and stays.
    std::fs::create_dir_all(own.join("4194999-0-old")).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(work.join("4194999-0-other")).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let agent = Decrypt::new(Some(kp), Some(work.clone()));
    assert_eq!(agent.root(), own);
    assert!(!own.join("4194999-0-old").exists());
    assert!(work.join("4194999-0-other").exists());
    let mut m = agent.model("my model", &enc, &[], "{}").unwrap();
    assert_eq!(m.location(), enc);
    m.action(AgentAction::Load).unwrap();
    let loc = m.location();
    assert!(loc.starts_with(&own) && loc != enc);
    assert_eq!(std::fs::read(loc.join("1/model.onnx")).unwrap(), vec![3u8; 10_000]);
    assert_eq!(std::fs::metadata(&loc).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&work).unwrap().permissions().mode() & 0o7777, 0o1777);
    m.action(AgentAction::Unload).unwrap();
    m.action(AgentAction::UnloadComplete).unwrap();
    assert!(!loc.exists());

    // A model in plaintext, one with no file but its configuration, or a wrong key, fails and
    // leaves nothing behind.
    let mut plain = agent.model("p", &src, &[], "{}").unwrap();
    let e = plain.action(AgentAction::Load).unwrap_err().message;
    assert!(e.contains("'1/model.onnx' is not a file encrypted"), "{e}");
    let bare = dir.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::copy(src.join("config.pbtxt"), bare.join("config.pbtxt")).unwrap();
    let mut bare = agent.model("b", &bare, &[], "{}").unwrap();
    assert!(bare.action(AgentAction::Load).unwrap_err().message.contains("no encrypted file"));
    let wrong = Decrypt::new(Some(key(dir.path(), &[5; 32])), Some(work.clone()));
    let mut w = wrong.model("w", &enc, &[], "{}").unwrap();
    assert!(w.action(AgentAction::Load).unwrap_err().message.contains("authentication failed"));
    assert_eq!(std::fs::read_dir(&own).unwrap().count(), 0);
    assert!(Decrypt::new(None, Some(work.clone())).model("x", &enc, &[], "{}").is_err());

    // A file that is not a ciphertext for its path fails the load naming it.
    std::fs::copy(enc.join("1/model.onnx"), enc.join("1/extra.bin")).unwrap();
    let mut moved = agent.model("m", &enc, &[], "{}").unwrap();
    let e = moved.action(AgentAction::Load).unwrap_err().message;
    assert!(e.contains("'1/extra.bin'") && e.contains("authentication failed"), "{e}");
    std::fs::write(enc.join("1/extra.bin"), b"plain").unwrap();
    let e = moved.action(AgentAction::Load).unwrap_err().message;
    assert!(e.contains("'1/extra.bin' is not a file encrypted"), "{e}");
    assert_eq!(std::fs::read_dir(&own).unwrap().count(), 0);
    assert!(work.join("4194999-0-other").exists());
}

#[test]
fn an_own_folder_that_is_not_private_is_neither_used_nor_changed() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let uid = rustix::process::geteuid().as_raw();
    let own = work.join(format!("tritonrs-decrypt-{uid}"));
    std::fs::create_dir_all(own.join("4194999-0-old")).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = Decrypt::new(Some(key(dir.path(), &[4; 32])), Some(work.clone()));
    assert!(own.join("4194999-0-old").exists(), "not swept");
    let mut m = agent.model("m", dir.path(), &[], "{}").unwrap();
    let e = m.action(AgentAction::Load).unwrap_err().message;
    assert!(e.contains("may be used by other users (mode 755"), "{e}");
    assert_eq!(std::fs::metadata(&own).unwrap().permissions().mode() & 0o777, 0o755);
    std::fs::remove_dir_all(&own).unwrap();
    std::os::unix::fs::symlink(dir.path(), &own).unwrap();
    let e = m.action(AgentAction::Load).unwrap_err().message;
    assert!(e.contains("is not a folder"), "{e}");
}

#[test]
fn the_default_folder_is_on_a_ram_backed_filesystem_where_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    let none = dir.path().join("no-shm");
    std::fs::create_dir(&shm).unwrap();
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| std::ffi::OsString::from(v))
    };
    let all = vars(&[
        ("RUNTIME_DIRECTORY", "/run/tritonrs:/run/other"),
        ("XDG_RUNTIME_DIR", "/run/user/7"),
        ("TMPDIR", "/var/tmp"),
    ]);
    assert_eq!(default_root(&all, &shm, 7), Path::new("/run/tritonrs/decrypt"));
    let user = vars(&[("RUNTIME_DIRECTORY", ""), ("XDG_RUNTIME_DIR", "/run/user/7"), ("TMPDIR", "/var/tmp")]);
    assert_eq!(default_root(&user, &shm, 7), Path::new("/run/user/7/tritonrs-decrypt-7"));
    // Relative paths are ignored.
    let relative = vars(&[("RUNTIME_DIRECTORY", "run"), ("XDG_RUNTIME_DIR", "user"), ("TMPDIR", "/var/tmp")]);
    assert_eq!(default_root(&relative, &shm, 7), shm.join("tritonrs-decrypt-7"));
    assert_eq!(default_root(&relative, &none, 7), Path::new("/var/tmp/tritonrs-decrypt-7"));
    assert_eq!(default_root(&vars(&[]), &none, 0), Path::new("/tmp/tritonrs-decrypt-0"));
}
