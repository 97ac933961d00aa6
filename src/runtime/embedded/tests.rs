//! The embedded runtime end to end: a server and clients in threads of one process.

use super::client::Event;
use super::*;
use crate::runtime::resilient::ResMsg;
use crate::runtime::wire::Msg;
use crate::runtime::{Runtime, Scope};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn job(size: u32, nodes: u32) -> (Server, Vec<Client>) {
    let server = Server::start(
        JobSpec {
            nodes: node_names(size, nodes, "h"),
        },
        None,
    )
    .unwrap();
    let clients = (0..size)
        .map(|r| Client::connect(server.socket(), r, server.token.clone()).unwrap())
        .collect();
    (server, clients)
}

fn in_threads<T: Send>(clients: &[Client], f: impl Fn(&Client) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = clients.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn node_names_split_ranks_in_blocks() {
    assert_eq!(
        node_names(5, 2, "h"),
        ["h-node0", "h-node0", "h-node0", "h-node1", "h-node1"]
    );
    assert_eq!(node_names(2, 1, "h"), ["h", "h"]);
    assert_eq!(node_names(2, 4, "h"), ["h-node0", "h-node1"]);
}

#[test]
fn collecting_fence_delivers_every_value_respecting_scope() {
    let (_s, clients) = job(6, 2);
    let ok = in_threads(&clients, |c| {
        let r = c.info().rank;
        c.put(Scope::Global, "g", &[r as u8]).unwrap();
        c.put(Scope::Local, "l", &[r as u8 + 100]).unwrap();
        c.commit().unwrap();
        c.fence(true, Duration::from_secs(20)).unwrap();
        for peer in 0..6u32 {
            assert_eq!(
                c.get(peer, "g", Duration::from_millis(1)).unwrap(),
                vec![peer as u8]
            );
            let local = c.node_of(peer).unwrap() == c.info().node;
            let got = c.get(peer, "l", Duration::from_millis(50));
            if local {
                assert_eq!(got.unwrap(), vec![peer as u8 + 100]);
            } else {
                assert!(
                    got.is_err(),
                    "local-scope value of rank {peer} leaked to rank {r}"
                );
            }
        }
        true
    });
    assert!(ok.iter().all(|&b| b));
    assert_eq!(clients[4].info().local_peers, vec![3, 4, 5]);
    assert_eq!(clients[4].info().local_rank, 1);
}

#[test]
fn on_demand_get_after_a_plain_fence() {
    let (_s, clients) = job(3, 1);
    in_threads(&clients, |c| {
        c.put(Scope::Global, "k", format!("v{}", c.info().rank).as_bytes())
            .unwrap();
        c.commit().unwrap();
        c.fence(false, Duration::from_secs(20)).unwrap();
        for peer in 0..3 {
            assert_eq!(
                c.get(peer, "k", Duration::from_secs(5)).unwrap(),
                format!("v{peer}").into_bytes()
            );
        }
    });
}

#[test]
fn a_peer_that_never_arrives_fails_the_fence_naming_it() {
    let server = Server::start(
        JobSpec {
            nodes: node_names(3, 1, "h"),
        },
        None,
    )
    .unwrap();
    let a = Client::connect(server.socket(), 0, server.token.clone()).unwrap();
    let b = Client::connect(server.socket(), 1, server.token.clone()).unwrap();
    let res = in_threads(&[a, b], |c| c.fence(true, Duration::from_millis(500)));
    for r in res {
        match r {
            Err(RuntimeError::FenceTimeout { missing, .. }) => assert_eq!(missing, vec![2]),
            other => panic!("expected a fence timeout naming rank 2, got {other:?}"),
        }
    }
}

#[test]
fn a_live_member_that_never_enters_is_named_alone_by_everyone() {
    // Rank 2 is connected but never enters the fence; rank 3 is its child in the tree.
    let (_s, clients) = job(8, 1);
    let res = in_threads(&clients, |c| {
        if c.info().rank == 2 {
            return None;
        }
        Some(c.fence(true, Duration::from_millis(500)))
    });
    for (r, res) in res.into_iter().enumerate() {
        match res {
            None => assert_eq!(r, 2),
            Some(Err(RuntimeError::FenceTimeout { missing, .. })) => {
                assert_eq!(missing, vec![2], "rank {r}")
            }
            Some(other) => panic!("rank {r}: expected a timeout naming rank 2, got {other:?}"),
        }
    }
}

#[test]
fn get_of_a_missing_key_times_out() {
    let (_s, clients) = job(2, 1);
    let t = Instant::now();
    let e = clients[0]
        .get(1, "nothing", Duration::from_millis(200))
        .unwrap_err();
    assert!(matches!(e, RuntimeError::GetTimeout { rank: 1, .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// Closes a client's socket without a goodbye: the server reports it dead.
fn kill(dead: Client) {
    dead.shared
        .writer
        .lock()
        .unwrap()
        .shutdown(std::net::Shutdown::Both)
        .unwrap();
    std::mem::forget(dead);
}

#[test]
fn a_dead_peer_is_reported_to_waiters_and_the_fence_agrees_on_it() {
    let (_s, mut clients) = job(2, 1);
    kill(clients.pop().unwrap());
    let e = clients[0].get(1, "k", Duration::from_secs(10)).unwrap_err();
    assert!(matches!(e, RuntimeError::PeerFailed { .. }), "{e}");
    clients[0].fence(false, Duration::from_secs(10)).unwrap();
    assert_eq!(clients[0].failed(), vec![1]);
    assert_eq!(clients[0].agreed_failed(), vec![1]);
}

#[test]
fn the_star_fence_fails_on_a_dead_peer() {
    let (_s, clients) = job(2, 1);
    let mut clients: Vec<Client> = clients
        .into_iter()
        .map(|c| c.with_fence(FenceKind::Star))
        .collect();
    kill(clients.pop().unwrap());
    let e = clients[0]
        .fence(false, Duration::from_secs(10))
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::PeerFailed { ref ranks } if ranks == &vec![1]),
        "{e}"
    );
    assert_eq!(clients[0].failed(), vec![1]);
}

#[test]
fn the_star_fence_still_collects() {
    let (_s, clients) = job(4, 2);
    let clients: Vec<Client> = clients
        .into_iter()
        .map(|c| c.with_fence(FenceKind::Star))
        .collect();
    in_threads(&clients, |c| {
        c.put(Scope::Global, "g", &[c.info().rank as u8]).unwrap();
        c.commit().unwrap();
        c.fence(true, Duration::from_secs(20)).unwrap();
        for peer in 0..4u32 {
            assert_eq!(
                c.get(peer, "g", Duration::from_millis(1)).unwrap(),
                vec![peer as u8]
            );
        }
    });
}

#[test]
fn survivors_agree_when_peers_die_mid_job_and_go_on_without_them() {
    let (_s, mut clients) = job(8, 2);
    // Ranks 0 (the first root) and 5 die before the fence.
    let five = clients.remove(5);
    let zero = clients.remove(0);
    kill(zero);
    kill(five);
    let res = in_threads(&clients, |c| {
        let r = c.info().rank;
        c.put(Scope::Global, "g", &[r as u8]).unwrap();
        c.commit().unwrap();
        c.fence(true, Duration::from_secs(20)).unwrap();
        for peer in 0..8u32 {
            let got = c.get(peer, "g", Duration::from_secs(5));
            if peer == 0 || peer == 5 {
                assert!(
                    matches!(got, Err(RuntimeError::PeerFailed { .. })),
                    "{got:?}"
                );
            } else {
                assert_eq!(got.unwrap(), vec![peer as u8]);
            }
        }
        // A later fence runs over the survivors only.
        c.fence(false, Duration::from_secs(20)).unwrap();
        c.agreed_failed()
    });
    for agreed in res {
        assert_eq!(agreed, vec![0, 5]);
    }
}

#[test]
fn a_decided_fence_keeps_answering_after_fence_returned() {
    use crate::runtime::resilient::{view_hash, Body, View};
    let (_s, clients) = job(3, 1);
    in_threads(&clients, |c| {
        c.fence(true, Duration::from_secs(20)).unwrap()
    });
    // Rank 2 forgets its own finished fence, so answers to it reach its event queue.
    *clients[2].shared.last.lock().unwrap() = None;
    // A late report of fence 1 (as after a repair), to rank 0, which is back in the
    // application: its reader thread answers with the decision.
    let late = ResMsg {
        epoch: 1,
        view: View {
            hash: view_hash(&[]),
            failed: Arc::new(vec![]),
        },
        body: Body::Up {
            root: 0,
            data: Default::default(),
            acked: None,
        },
    };
    clients[2]
        .send(&Msg::Route {
            to: 0,
            payload: FencePayload::Res(late).encode(),
        })
        .unwrap();
    let events = clients[2].events.lock().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(Event::Fence {
                from: 0,
                msg: FencePayload::Res(m),
            }) if m.kind() == "commit" => break,
            Ok(_) => continue,
            Err(e) => panic!("no answer from rank 0's finished fence: {e}"),
        }
    }
}

#[test]
fn a_message_to_a_rank_that_left_is_answered_with_peer_exited() {
    let (server, mut clients) = job(2, 1);
    drop(clients.pop().unwrap());
    let t = Instant::now();
    while !server.shared.state.lock().unwrap().finished.contains(&1) {
        assert!(t.elapsed() < Duration::from_secs(10), "goodbye not seen");
        std::thread::sleep(Duration::from_millis(5));
    }
    clients[0]
        .send(&Msg::Route {
            to: 1,
            payload: FencePayload::Present { epoch: 1 }.encode(),
        })
        .unwrap();
    let ev = clients[0]
        .events
        .lock()
        .unwrap()
        .recv_timeout(Duration::from_secs(10));
    assert!(matches!(ev, Ok(Event::PeerExited { rank: 1 })));
    // Leaving is not failing.
    assert!(clients[0].failed().is_empty());
}

#[test]
fn bad_token_is_refused() {
    let server = Server::start(
        JobSpec {
            nodes: node_names(1, 1, "h"),
        },
        None,
    )
    .unwrap();
    assert!(Client::connect(server.socket(), 0, vec![0; 16]).is_err());
    let mode = std::fs::metadata(server.socket()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
}
