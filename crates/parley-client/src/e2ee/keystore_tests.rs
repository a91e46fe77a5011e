//! The key store: a device written out and read back keeps its identity and its groups.

use super::*;
use crate::e2ee::mls::{Device, Incoming};

const GROUP: &[u8] = b"conv-ks";

fn me(user: &str) -> DeviceRef {
    DeviceRef {
        user_id: user.into(),
        device_id: "d".into(),
    }
}

/// The device saved to `store` and read back, as a restarted app would.
fn reopen(store: &KeyStore, device: &Device, meta: &Meta) -> (Device, Meta) {
    store.save(meta, device.storage()).unwrap();
    let (meta, storage) = store.load().unwrap().unwrap();
    let public = meta.signature_public_key().unwrap();
    (
        Device::restore(device.me().clone(), storage, &public).unwrap(),
        meta,
    )
}

fn read(device: &Device, bytes: &[u8]) -> Vec<u8> {
    match device.process(GROUP, bytes).unwrap() {
        Incoming::Application { plaintext, .. } => plaintext,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reopened_store_keeps_conversing() {
    let dir = tempfile::tempdir().unwrap();
    let store = KeyStore::open(dir.path().join("ana")).unwrap();
    assert!(store.load().unwrap().is_none());
    let ana = Device::generate(me("ana")).unwrap();
    let mut meta = Meta::new(ana.me(), ana.signature_public_key());
    meta.conv("conv-ks").cursor = 7;
    meta.conv("conv-ks")
        .sent
        .insert("k1".into(), "own text".into());

    let ben = Device::generate(me("ben")).unwrap();
    let kp = ben.key_packages(1).unwrap().remove(0);
    let (kp, _) = ana.validate_key_package(&kp).unwrap();
    ana.create_group(GROUP).unwrap();
    let out = ana.add(GROUP, &[kp]).unwrap();
    ana.merge_pending(GROUP).unwrap();
    ben.join(&out.welcome.unwrap()).unwrap();

    let (ana, meta2) = reopen(&store, &ana, &meta);
    assert_eq!(meta2, meta);
    assert_eq!(ana.epoch(GROUP).unwrap(), 1);
    assert_eq!(ana.members(GROUP).unwrap(), vec![me("ana"), me("ben")]);
    let m = ana.encrypt(GROUP, b"after reopening").unwrap();
    assert_eq!(read(&ben, &m), b"after reopening");

    // A pending Commit survives the reopening too, and merges after it.
    let out = ana.self_update(GROUP).unwrap();
    let (ana, _) = reopen(&store, &ana, &meta);
    assert!(ana.has_pending_commit(GROUP).unwrap());
    ana.merge_pending(GROUP).unwrap();
    assert!(matches!(
        ben.process(GROUP, &out.commit).unwrap(),
        Incoming::Commit { .. }
    ));
    let m = ben.encrypt(GROUP, b"epoch 2").unwrap();
    assert_eq!(read(&ana, &m), b"epoch 2");
}

#[test]
fn a_welcome_for_a_key_package_made_before_reopening_is_read_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = KeyStore::open(dir.path()).unwrap();
    let ben = Device::generate(me("ben")).unwrap();
    let meta = Meta::new(ben.me(), ben.signature_public_key());
    let kp = ben.key_packages(1).unwrap().remove(0);
    let (ben, _) = reopen(&store, &ben, &meta);

    let ana = Device::generate(me("ana")).unwrap();
    let (kp, _) = ana.validate_key_package(&kp).unwrap();
    ana.create_group(GROUP).unwrap();
    let out = ana.add(GROUP, &[kp]).unwrap();
    ana.merge_pending(GROUP).unwrap();
    assert_eq!(ben.join(&out.welcome.unwrap()).unwrap().epoch, 1);
}

#[test]
fn the_state_file_is_private_and_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = KeyStore::open(dir.path()).unwrap();
    let ana = Device::generate(me("ana")).unwrap();
    let meta = Meta::new(ana.me(), ana.signature_public_key());
    store.save(&meta, ana.storage()).unwrap();
    store.save(&meta, ana.storage()).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![STATE_FILE.to_owned()]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn damaged_files_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let store = KeyStore::open(dir.path()).unwrap();
    std::fs::write(store.path(), b"{not json").unwrap();
    assert!(matches!(store.load(), Err(E2eeError::Store { .. })));
    // A length prefix far beyond the end of the bytes.
    let mut raw = 1u64.to_be_bytes().to_vec();
    raw.extend_from_slice(&u64::MAX.to_be_bytes());
    raw.extend_from_slice(&1u64.to_be_bytes());
    assert!(decode_storage(&raw).is_err());
    assert!(decode_storage(&[0, 1]).is_err());
    let ana = Device::generate(me("ana")).unwrap();
    let encoded = encode_storage(ana.storage()).unwrap();
    let decoded = decode_storage(&encoded).unwrap();
    assert_eq!(encode_storage(&decoded).unwrap(), encoded);
    let mut trailing = encoded;
    trailing.push(0);
    assert!(decode_storage(&trailing).is_err());
}
