//! How many event streams each caller and each client address holds open on this replica, and
//! the caps on both. An open stream costs a connection and a database poll every 250 ms for as
//! long as the client keeps it, so without a cap one caller (or one address minting identities)
//! could hold enough of them to keep the database busy polling for nobody.
//!
//! Counted in this replica's memory, not in the database like the rate limit: a stream is a
//! load on the replica that serves it, and a count in the database would outlive a replica
//! that died holding streams. Behind R replicas a caller may hold R times the cap, on R
//! replicas' worth of capacity (docs/decisions/0039-limits-per-address.md).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The open streams of this replica, per caller and per client address.
pub struct StreamSlots {
    per_caller: u32,
    per_ip: u32,
    open: Arc<Mutex<Open>>,
}

#[derive(Default)]
struct Open {
    callers: HashMap<String, u32>,
    ips: HashMap<String, u32>,
}

/// One open stream's place in the counts, given back when it is dropped: when the stream ends
/// or the client goes away (the server drops the response body either way).
pub struct StreamSlot {
    open: Arc<Mutex<Open>>,
    caller: String,
    ip: String,
}

impl StreamSlots {
    /// Caps of `per_caller` streams per signed-in caller and `per_ip` per client address; 0 is
    /// no cap.
    pub fn new(per_caller: u32, per_ip: u32) -> Self {
        StreamSlots {
            per_caller,
            per_ip,
            open: Arc::default(),
        }
    }

    /// A slot for one more stream of `caller` from `ip` (`None`: unknown, all such share one
    /// count), or the cap it would pass, as a sentence.
    pub fn take(&self, caller: &str, ip: Option<IpAddr>) -> Result<StreamSlot, String> {
        let ip = ip.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        let mut open = lock(&self.open);
        let by_caller = open.callers.get(caller).copied().unwrap_or(0);
        let by_ip = open.ips.get(&ip).copied().unwrap_or(0);
        if self.per_caller > 0 && by_caller >= self.per_caller {
            return Err(format!(
                "this caller already holds {by_caller} open event streams, the most one caller \
                 may (max_event_streams_per_caller = {}); close one first",
                self.per_caller
            ));
        }
        if self.per_ip > 0 && by_ip >= self.per_ip {
            return Err(format!(
                "{by_ip} event streams are already open from this address, the most one address \
                 may over all its identities (max_event_streams_per_ip = {}); close one first",
                self.per_ip
            ));
        }
        *open.callers.entry(caller.to_owned()).or_default() += 1;
        *open.ips.entry(ip.clone()).or_default() += 1;
        Ok(StreamSlot {
            open: self.open.clone(),
            caller: caller.to_owned(),
            ip,
        })
    }
}

fn lock(open: &Mutex<Open>) -> std::sync::MutexGuard<'_, Open> {
    open.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut guard = lock(&self.open);
        let open = &mut *guard;
        // Entries at zero are removed so the maps hold only callers with streams open now.
        for (map, key) in [(&mut open.callers, &self.caller), (&mut open.ips, &self.ip)] {
            if let Some(n) = map.get_mut(key.as_str()) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key.as_str());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_caller_and_per_address_and_a_dropped_slot_frees_its_place() {
        let slots = StreamSlots::new(2, 3);
        let here: Option<IpAddr> = Some("203.0.113.7".parse().unwrap());
        let there: Option<IpAddr> = Some("198.51.100.1".parse().unwrap());
        let a1 = slots.take("a", here).unwrap();
        let _a2 = slots.take("a", here).unwrap();
        let err = slots.take("a", there).err().unwrap();
        assert!(err.contains("max_event_streams_per_caller = 2"), "{err}");
        let _b1 = slots.take("b", here).unwrap();
        let err = slots.take("b", here).err().unwrap();
        assert!(err.contains("max_event_streams_per_ip = 3"), "{err}");
        let _b2 = slots.take("b", there).unwrap();
        drop(a1);
        let _a3 = slots.take("a", here).unwrap();
        assert_eq!(lock(&slots.open).callers["a"], 2);
    }

    #[test]
    fn zero_is_no_cap_and_counts_empty_out() {
        let slots = StreamSlots::new(0, 0);
        let held: Vec<_> = (0..100).map(|_| slots.take("a", None).unwrap()).collect();
        drop(held);
        let open = lock(&slots.open);
        assert!(open.callers.is_empty() && open.ips.is_empty());
    }
}
