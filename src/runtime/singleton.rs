//! A process started with no launcher: a job of size 1 whose puts are its own gets.

use super::{JobInfo, Result, Runtime, RuntimeError, Scope};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

pub struct Singleton {
    info: JobInfo,
    store: Mutex<HashMap<String, Vec<u8>>>,
}

impl Singleton {
    pub fn new() -> Singleton {
        Singleton {
            info: JobInfo {
                rank: 0,
                size: 1,
                node: hostname(),
                local_rank: 0,
                local_peers: vec![0],
                backend: "singleton".into(),
            },
            store: Mutex::new(HashMap::new()),
        }
    }
}

impl Default for Singleton {
    fn default() -> Self {
        Self::new()
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else "localhost").
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

impl Runtime for Singleton {
    fn info(&self) -> &JobInfo {
        &self.info
    }
    fn node_of(&self, rank: u32) -> Result<String> {
        match rank {
            0 => Ok(self.info.node.clone()),
            _ => Err(RuntimeError::BadRank { rank, size: 1 }),
        }
    }
    fn put(&self, _scope: Scope, key: &str, value: &[u8]) -> Result<()> {
        self.store
            .lock()
            .expect("store lock")
            .insert(key.to_string(), value.to_vec());
        Ok(())
    }
    fn commit(&self) -> Result<()> {
        Ok(())
    }
    fn fence(&self, _collect: bool, _timeout: Duration) -> Result<()> {
        Ok(())
    }
    fn get(&self, rank: u32, key: &str, _timeout: Duration) -> Result<Vec<u8>> {
        if rank != 0 {
            return Err(RuntimeError::BadRank { rank, size: 1 });
        }
        self.store
            .lock()
            .expect("store lock")
            .get(key)
            .cloned()
            .ok_or_else(|| RuntimeError::NotFound {
                rank,
                key: key.to_string(),
            })
    }
}
