//! The MLS layer without a server: the tests play the Delivery Service by handing every message
//! to every other member in one order.

use super::*;

const GROUP: &[u8] = b"conv-1";

fn device(user: &str, device: &str) -> Device {
    Device::generate(DeviceRef {
        user_id: user.into(),
        device_id: device.into(),
    })
    .unwrap()
}

fn key_package(d: &Device) -> KeyPackage {
    let bytes = d.key_packages(1).unwrap().remove(0);
    d.validate_key_package(&bytes).unwrap().0
}

/// `n` devices of `n` users in one group, created by the first, which adds the others in one
/// Commit; everyone at epoch 1.
fn group_of(n: usize) -> Vec<Device> {
    let devices: Vec<Device> = (0..n).map(|i| device(&format!("u{i}"), "d")).collect();
    devices[0].create_group(GROUP).unwrap();
    let kps: Vec<KeyPackage> = devices[1..].iter().map(key_package).collect();
    if !kps.is_empty() {
        let out = devices[0].add(GROUP, &kps).unwrap();
        devices[0].merge_pending(GROUP).unwrap();
        let welcome = out.welcome.unwrap();
        for d in &devices[1..] {
            let joined = d.join(&welcome).unwrap();
            assert_eq!(joined.group_id, GROUP);
            assert_eq!(joined.epoch, 1);
            assert_eq!(&joined.sender, devices[0].me());
        }
    }
    devices
}

/// Hands a message of `from` to every other device of `to` still in the group.
fn deliver(to: &[Device], from: usize, bytes: &[u8]) -> Vec<Option<Incoming>> {
    to.iter()
        .enumerate()
        .map(|(i, d)| {
            if i == from || !d.is_active(GROUP).unwrap() {
                return None;
            }
            Some(d.process(GROUP, bytes).unwrap())
        })
        .collect()
}

fn assert_all_read(devices: &[Device], from: usize, text: &str) {
    let bytes = devices[from].encrypt(GROUP, text.as_bytes()).unwrap();
    for (i, got) in deliver(devices, from, &bytes).into_iter().enumerate() {
        if i == from {
            continue;
        }
        match got {
            Some(Incoming::Application { sender, plaintext }) => {
                assert_eq!(&sender, devices[from].me());
                assert_eq!(plaintext, text.as_bytes(), "device {i}");
            }
            other => panic!("device {i} got {other:?}"),
        }
    }
}

#[test]
fn identities_read_back_and_odd_ones_are_refused() {
    let d = DeviceRef {
        user_id: "ana".into(),
        device_id: "phone".into(),
    };
    let credential: Credential = BasicCredential::new(identity_of(&d)).into();
    assert_eq!(device_of(&credential).unwrap(), d);
    for odd in ["ana", "ana/", "/phone", "a/b/c"] {
        let credential: Credential = BasicCredential::new(odd.as_bytes().to_vec()).into();
        assert!(device_of(&credential).is_err(), "{odd}");
    }
}

#[test]
fn two_members_converse() {
    let devices = group_of(2);
    assert_eq!(devices[0].epoch(GROUP).unwrap(), 1);
    assert_eq!(devices[1].epoch(GROUP).unwrap(), 1);
    for round in 0..5 {
        assert_all_read(&devices, 0, &format!("ping {round}"));
        assert_all_read(&devices, 1, &format!("pong {round}"));
    }
    let members = devices[1].members(GROUP).unwrap();
    assert_eq!(
        members,
        vec![devices[0].me().clone(), devices[1].me().clone()]
    );
}

#[test]
fn ten_members_converse() {
    let devices = group_of(10);
    for (i, _) in devices.iter().enumerate() {
        assert_all_read(&devices, i, &format!("hello from {i}"));
    }
    // A Commit by a member other than the creator keeps everyone in step.
    let out = devices[4].self_update(GROUP).unwrap();
    devices[4].merge_pending(GROUP).unwrap();
    deliver(&devices, 4, &out.commit);
    for d in &devices {
        assert_eq!(d.epoch(GROUP).unwrap(), 2);
        assert_eq!(d.members(GROUP).unwrap().len(), 10);
    }
    assert_all_read(&devices, 9, "after the update");
}

#[test]
fn a_removed_member_cannot_decrypt_later_messages() {
    let devices = group_of(3);
    let out = devices[0]
        .remove(GROUP, &[devices[2].me().clone()])
        .unwrap();
    assert_eq!(out.removed, vec![devices[2].me().clone()]);
    assert!(out.welcome.is_none());
    let changes = devices[0].merge_pending(GROUP).unwrap();
    assert_eq!(changes.removed, vec![devices[2].me().clone()]);
    for (i, got) in deliver(&devices, 0, &out.commit).into_iter().enumerate() {
        match (i, got) {
            (0, None) => {}
            (1 | 2, Some(Incoming::Commit { sender, changes })) => {
                assert_eq!(&sender, devices[0].me());
                assert_eq!(changes.removed, vec![devices[2].me().clone()]);
                assert_eq!(changes.self_removed, i == 2);
            }
            (i, other) => panic!("device {i} got {other:?}"),
        }
    }
    assert!(!devices[2].is_active(GROUP).unwrap());
    let later = devices[1].encrypt(GROUP, b"not for 2").unwrap();
    assert!(matches!(
        devices[0].process(GROUP, &later),
        Ok(Incoming::Application { .. })
    ));
    assert!(matches!(
        devices[2].process(GROUP, &later),
        Err(E2eeError::Removed { .. })
    ));
    assert!(matches!(
        devices[2].encrypt(GROUP, b"x"),
        Err(E2eeError::Removed { .. })
    ));
    assert!(matches!(
        devices[0].remove(GROUP, &[devices[0].me().clone()]),
        Err(E2eeError::SelfRemoval)
    ));
}

#[test]
fn racing_commits_resolve_to_the_first() {
    let devices = group_of(3);
    // Devices 1 and 2 both commit for epoch 1; the Delivery Service takes 1's first.
    let winner = devices[1].self_update(GROUP).unwrap();
    let loser = devices[2].self_update(GROUP).unwrap();
    devices[1].merge_pending(GROUP).unwrap();
    assert!(matches!(
        deliver(&devices[..1], 1, &winner.commit)[0],
        Some(Incoming::Commit { .. })
    ));
    // The loser learns it lost, drops its Commit and applies the winner's.
    devices[2].clear_pending(GROUP).unwrap();
    assert!(!devices[2].has_pending_commit(GROUP).unwrap());
    assert!(matches!(
        devices[2].process(GROUP, &winner.commit),
        Ok(Incoming::Commit { .. })
    ));
    // Nobody can apply the refused Commit: it was made in an epoch they left.
    assert!(devices[0].process(GROUP, &loser.commit).is_err());
    for d in &devices {
        assert_eq!(d.epoch(GROUP).unwrap(), 2);
    }
    // The loser commits again, in the new epoch, and everyone applies it.
    let again = devices[2].self_update(GROUP).unwrap();
    devices[2].merge_pending(GROUP).unwrap();
    deliver(&devices, 2, &again.commit);
    for d in &devices {
        assert_eq!(d.epoch(GROUP).unwrap(), 3);
    }
    for i in 0..3 {
        assert_all_read(&devices, i, &format!("after the race, {i}"));
    }
}

#[test]
fn an_offline_member_catches_up_across_fifty_epochs() {
    let devices = group_of(3);
    let mut log = Vec::new();
    for e in 0..50 {
        let out = devices[1].self_update(GROUP).unwrap();
        devices[1].merge_pending(GROUP).unwrap();
        // Device 0 follows along; device 2 is offline and only the log keeps the messages.
        assert!(matches!(
            devices[0].process(GROUP, &out.commit),
            Ok(Incoming::Commit { .. })
        ));
        log.push((out.commit, None));
        let text = format!("epoch {e}");
        let app = devices[1].encrypt(GROUP, text.as_bytes()).unwrap();
        assert!(matches!(
            devices[0].process(GROUP, &app),
            Ok(Incoming::Application { .. })
        ));
        log.push((app, Some(text)));
    }
    for (bytes, text) in log {
        match (devices[2].process(GROUP, &bytes).unwrap(), text) {
            (Incoming::Commit { .. }, None) => {}
            (Incoming::Application { plaintext, .. }, Some(text)) => {
                assert_eq!(plaintext, text.as_bytes());
            }
            (got, text) => panic!("{got:?} for {text:?}"),
        }
    }
    assert_eq!(devices[2].epoch(GROUP).unwrap(), 51);
    assert_all_read(&devices, 2, "back online");
}

#[test]
fn a_last_resort_key_package_joins_and_stays_usable() {
    let devices = group_of(1);
    let bo = device("bo", "d");
    let bytes = bo.last_resort_key_package().unwrap();
    let (kp, named) = bo.validate_key_package(&bytes).unwrap();
    assert!(kp.last_resort());
    assert_eq!(&named, bo.me());
    let out = devices[0].add(GROUP, std::slice::from_ref(&kp)).unwrap();
    devices[0].merge_pending(GROUP).unwrap();
    bo.join(&out.welcome.unwrap()).unwrap();
    // The same package adds bo to a second group: its private key was kept.
    devices[0].create_group(b"conv-2").unwrap();
    let out = devices[0].add(b"conv-2", &[kp]).unwrap();
    devices[0].merge_pending(b"conv-2").unwrap();
    assert_eq!(bo.join(&out.welcome.unwrap()).unwrap().group_id, b"conv-2");
}

#[test]
fn a_removed_device_added_again_rejoins() {
    let devices = group_of(2);
    let out = devices[0]
        .remove(GROUP, &[devices[1].me().clone()])
        .unwrap();
    devices[0].merge_pending(GROUP).unwrap();
    deliver(&devices, 0, &out.commit);
    assert!(!devices[1].is_active(GROUP).unwrap());
    let out = devices[0].add(GROUP, &[key_package(&devices[1])]).unwrap();
    devices[0].merge_pending(GROUP).unwrap();
    assert_eq!(devices[1].join(&out.welcome.unwrap()).unwrap().epoch, 3);
    assert_all_read(&devices, 1, "back again");
}

#[test]
fn foreign_bytes_are_refused() {
    let d = device("ana", "d");
    assert!(matches!(
        d.validate_key_package(b"\x00\x01junk"),
        Err(E2eeError::Decode { .. })
    ));
    assert!(matches!(d.join(b"junk"), Err(E2eeError::Decode { .. })));
    d.create_group(GROUP).unwrap();
    let kp = d.key_packages(1).unwrap().remove(0);
    // A key package is not a message of the group.
    assert!(d.process(GROUP, &kp).is_err());
    assert!(matches!(d.epoch(b"other"), Err(E2eeError::NoGroup { .. })));
}
