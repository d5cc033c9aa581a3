//! Read coalescing: concurrent lookups by key share one database round trip.
//!
//! A hot read such as `GET /v1/jobs/{id}` (the portal and `shardwork job watch` poll it) costs
//! little in SQL but a whole round trip to the database each: socket writes, a server process
//! woken, a reply read back. Under load those round trips, not the query, bound the route. Here
//! a lookup joins the open batch; one driver per batch waits for a free lane (at most `lanes`
//! queries in flight), closes the batch and fetches every key in it with one query. So:
//!
//! - an idle server sends each lookup alone and at once: no timer, no added latency;
//! - a busy one sends fewer, larger queries, and the batch grows with the load;
//! - a lookup is never answered from a query sent before it arrived, so a reader sees every
//!   write committed before its request (no cache, nothing stale).
//!
//! The driver is a spawned task, so a client that hangs up cannot strand the lookups that
//! joined its batch.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::{Semaphore, oneshot};

/// Why a coalesced lookup has no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CoalesceError<E> {
    /// The batch's query failed; every lookup in it gets the same error.
    #[error("{0}")]
    Fetch(Arc<E>),
    /// The driver stopped before answering (its task panicked or the runtime shut down).
    #[error("the batched read was abandoned")]
    Abandoned,
}

type Fetch<K, V, E> = dyn Fn(Vec<K>) -> BoxFuture<'static, Result<Vec<(K, V)>, E>> + Send + Sync;
type Answer<V, E> = oneshot::Sender<Result<Option<V>, CoalesceError<E>>>;

struct Open<K, V, E> {
    waiting: Vec<(K, Answer<V, E>)>,
    /// A driver is spawned and has not yet taken the batch: later lookups join its batch.
    driver_pending: bool,
}

struct Inner<K, V, E> {
    open: Mutex<Open<K, V, E>>,
    lanes: Semaphore,
    max_batch: usize,
    fetch: Box<Fetch<K, V, E>>,
}

/// Batches lookups by `K` into one `fetch` of many keys; cheap to clone.
pub struct Coalescer<K, V, E> {
    inner: Arc<Inner<K, V, E>>,
}

impl<K, V, E> Clone for Coalescer<K, V, E> {
    fn clone(&self) -> Self {
        Coalescer {
            inner: self.inner.clone(),
        }
    }
}

impl<K, V, E> Coalescer<K, V, E>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + 'static,
    E: Send + Sync + 'static,
{
    /// `fetch` answers the rows found for a batch of distinct keys (a missing key is absent);
    /// at most `lanes` fetches run at once, each of at most `max_batch` keys.
    pub fn new(
        lanes: usize,
        max_batch: usize,
        fetch: impl Fn(Vec<K>) -> BoxFuture<'static, Result<Vec<(K, V)>, E>> + Send + Sync + 'static,
    ) -> Self {
        Coalescer {
            inner: Arc::new(Inner {
                open: Mutex::new(Open {
                    waiting: Vec::new(),
                    driver_pending: false,
                }),
                lanes: Semaphore::new(lanes.max(1)),
                max_batch: max_batch.max(1),
                fetch: Box::new(fetch),
            }),
        }
    }

    /// The value at `key`, `None` when the fetch found no row. Must run inside a Tokio runtime.
    pub async fn get(&self, key: K) -> Result<Option<V>, CoalesceError<E>> {
        let (answer, answered) = oneshot::channel();
        let spawn_driver = {
            let mut open = self.inner.open.lock().unwrap_or_else(|p| p.into_inner());
            open.waiting.push((key, answer));
            !std::mem::replace(&mut open.driver_pending, true)
        };
        if spawn_driver {
            tokio::spawn(drive(self.inner.clone()));
        }
        answered.await.unwrap_or(Err(CoalesceError::Abandoned))
    }
}

/// Waits for a lane, takes the open batch (spawning the next driver if keys are left over),
/// fetches it and answers every lookup in it. Boxed: a driver may spawn the next one, and a
/// recursive `async fn` has no nameable (`Send`) type.
fn drive<K, V, E>(inner: Arc<Inner<K, V, E>>) -> BoxFuture<'static, ()>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + 'static,
    E: Send + Sync + 'static,
{
    Box::pin(async move {
        let Ok(_lane) = inner.lanes.acquire().await else {
            return;
        };
        let batch: Vec<(K, Answer<V, E>)> = {
            let mut open = inner.open.lock().unwrap_or_else(|p| p.into_inner());
            let take = open.waiting.len().min(inner.max_batch);
            let batch = open.waiting.drain(..take).collect();
            if open.waiting.is_empty() {
                open.driver_pending = false;
            } else {
                tokio::spawn(drive(inner.clone()));
            }
            batch
        };
        let mut keys: Vec<K> = Vec::with_capacity(batch.len());
        for (key, _) in &batch {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        match (inner.fetch)(keys).await {
            Ok(rows) => {
                let found: HashMap<K, V> = rows.into_iter().collect();
                for (key, answer) in batch {
                    // A lookup whose caller went away has nobody to answer; that is fine.
                    let _ = answer.send(Ok(found.get(&key).cloned()));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for (_, answer) in batch {
                    let _ = answer.send(Err(CoalesceError::Fetch(e.clone())));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A fetch that records every batch it was given and answers `key * 10` for even keys.
    fn recording(
        delay: Duration,
        batches: Arc<Mutex<Vec<Vec<u32>>>>,
    ) -> Coalescer<u32, u32, String> {
        Coalescer::new(2, 8, move |keys: Vec<u32>| {
            let batches = batches.clone();
            Box::pin(async move {
                batches.lock().unwrap().push(keys.clone());
                tokio::time::sleep(delay).await;
                if keys.contains(&13) {
                    return Err("key 13 is unlucky".to_owned());
                }
                Ok(keys
                    .into_iter()
                    .filter(|k| k % 2 == 0)
                    .map(|k| (k, k * 10))
                    .collect())
            }) as BoxFuture<'static, _>
        })
    }

    #[tokio::test]
    async fn a_lone_lookup_is_fetched_alone() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let reads = recording(Duration::ZERO, batches.clone());
        assert_eq!(reads.get(4).await.unwrap(), Some(40));
        assert_eq!(reads.get(3).await.unwrap(), None);
        assert_eq!(*batches.lock().unwrap(), vec![vec![4], vec![3]]);
    }

    #[tokio::test]
    async fn concurrent_lookups_share_fetches_and_each_gets_its_own_row() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let reads = recording(Duration::from_millis(20), batches.clone());
        let lookups: Vec<_> = (0..40u32)
            .map(|i| {
                let reads = reads.clone();
                let key = i % 20;
                tokio::spawn(async move { (key, reads.get(key).await) })
            })
            .collect();
        for lookup in lookups {
            let (key, answer) = lookup.await.unwrap();
            let expected = (key % 2 == 0).then_some(key * 10);
            match answer {
                Ok(v) => assert_eq!(v, expected, "key {key}"),
                // Key 13's batch fails as a whole; every lookup in that batch sees the error.
                Err(CoalesceError::Fetch(e)) => assert_eq!(*e, "key 13 is unlucky"),
                Err(e) => panic!("key {key}: {e}"),
            }
        }
        let batches = batches.lock().unwrap();
        let fetched: usize = batches.iter().map(Vec::len).sum();
        assert!(
            batches.len() < 40,
            "40 lookups took {} fetches",
            batches.len()
        );
        assert!(batches.iter().all(|b| b.len() <= 8), "{batches:?}");
        // Keys are distinct within a batch, and every key was fetched.
        for b in batches.iter() {
            let mut d = b.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), b.len(), "{b:?}");
        }
        assert!(fetched >= 20);
    }

    #[tokio::test]
    async fn no_more_than_the_lanes_run_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (r, p) = (running.clone(), peak.clone());
        let reads: Coalescer<u32, u32, String> = Coalescer::new(2, 1, move |keys: Vec<u32>| {
            let (running, peak) = (r.clone(), p.clone());
            Box::pin(async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(keys.into_iter().map(|k| (k, k)).collect())
            }) as BoxFuture<'static, _>
        });
        let lookups: Vec<_> = (0..12u32)
            .map(|k| {
                let reads = reads.clone();
                tokio::spawn(async move { reads.get(k).await })
            })
            .collect();
        for (k, lookup) in lookups.into_iter().enumerate() {
            assert_eq!(lookup.await.unwrap().unwrap(), Some(k as u32));
        }
        assert_eq!(peak.load(Ordering::SeqCst), 2);
    }

    /// On one thread, so each `yield_now` lets exactly the spawned tasks run: both lanes are
    /// taken by slow fetches, then lookups 2 and 4 join one open batch whose driver waits for
    /// a lane. The caller of 2 goes away; 4 must still be answered, from the same batch. Had
    /// the first caller driven the batch itself, 4 would never be answered.
    #[tokio::test(flavor = "current_thread")]
    async fn a_caller_that_goes_away_does_not_strand_its_batch() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let reads = recording(Duration::from_millis(50), batches.clone());
        let get = |key: u32| {
            let reads = reads.clone();
            tokio::spawn(async move { reads.get(key).await })
        };
        let mut busy = Vec::new();
        for key in [100, 102] {
            busy.push(get(key));
            // The lookup, then its driver, run: each busy key takes a lane of its own.
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        }
        let going_away = get(2);
        tokio::task::yield_now().await;
        let staying = get(4);
        tokio::task::yield_now().await;
        going_away.abort();
        let answer = tokio::time::timeout(Duration::from_secs(5), staying)
            .await
            .expect("the lookup that stayed is answered")
            .unwrap();
        assert_eq!(answer.unwrap(), Some(40));
        for lookup in busy {
            lookup.await.unwrap().unwrap();
        }
        assert!(
            batches.lock().unwrap().contains(&vec![2, 4]),
            "{:?}",
            batches.lock().unwrap()
        );
    }
}
