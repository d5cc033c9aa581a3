//! How a proof replay gives way: the replay's training thread passes a [`StepGate`] after every
//! optimiser step and waits there while the validator holds it to judge the submissions and
//! merge the rounds that came in meanwhile. A replay is long (a quarter of a task, or the whole
//! of one) and runs off the round's critical path (decisions/0042); a verdict or a merge is on
//! it, so it must not wait for a replay to end. Pausing between steps keeps everything the
//! replay computed (and its lease, renewed as the pause lasts), and leaves its numbers exactly
//! what an unpaused replay gives: the step's arithmetic is untouched.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A gate the replay thread passes between steps; see the module docs.
#[derive(Debug, Default)]
pub struct StepGate {
    state: Mutex<GateState>,
    reopened: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    /// How many holds are out: the gate is open at 0.
    holds: usize,
    /// The time the replay thread has waited at the gate in all, so a replay's reported
    /// duration is its compute, not the verdicts it stood aside for.
    waited: Duration,
}

/// The gate held shut until this is dropped.
#[must_use = "the gate reopens when the hold is dropped"]
#[derive(Debug)]
pub struct Hold<'a> {
    gate: &'a StepGate,
}

impl StepGate {
    /// Shuts the gate: the replay thread stops at its next step boundary until every hold is
    /// dropped. Does not wait for it to get there (at most one step).
    pub fn hold(&self) -> Hold<'_> {
        self.lock().holds += 1;
        Hold { gate: self }
    }

    /// Called by the replay thread between steps: returns at once while the gate is open, else
    /// when it reopens.
    pub fn pass(&self) {
        let mut state = self.lock();
        if state.holds == 0 {
            return;
        }
        let since = Instant::now();
        while state.holds > 0 {
            state = self
                .reopened
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.waited += since.elapsed();
    }

    /// The time spent waiting at the gate so far.
    pub fn waited(&self) -> Duration {
        self.lock().waited
    }

    // A panic while the lock is held cannot leave the counts half-written (each is one
    // assignment), so a poisoned lock is as good as a clean one.
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.holds -= 1;
        if state.holds == 0 {
            self.gate.reopened.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A thread stepping through 1000 steps, passing the gate after each.
    fn stepper(gate: &Arc<StepGate>, steps: &Arc<AtomicUsize>) -> std::thread::JoinHandle<()> {
        let (gate, steps) = (gate.clone(), steps.clone());
        std::thread::spawn(move || {
            for _ in 0..1000 {
                steps.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
                gate.pass();
            }
        })
    }

    #[test]
    fn a_held_gate_stops_the_steps_until_every_hold_is_dropped() {
        let gate = Arc::new(StepGate::default());
        let steps = Arc::new(AtomicUsize::new(0));
        let outer = gate.hold();
        let inner = gate.hold();
        let thread = stepper(&gate, &steps);
        std::thread::sleep(Duration::from_millis(50));
        let stopped_at = steps.load(Ordering::SeqCst);
        assert_eq!(stopped_at, 1, "the first step ran, then the gate held it");
        drop(outer);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(steps.load(Ordering::SeqCst), 1, "one hold is still out");
        drop(inner);
        thread.join().unwrap();
        assert_eq!(steps.load(Ordering::SeqCst), 1000);
        let waited = gate.waited();
        assert!(
            waited >= Duration::from_millis(90) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }

    #[test]
    fn an_open_gate_costs_no_waiting() {
        let gate = Arc::new(StepGate::default());
        let steps = Arc::new(AtomicUsize::new(0));
        stepper(&gate, &steps).join().unwrap();
        assert_eq!(steps.load(Ordering::SeqCst), 1000);
        assert_eq!(gate.waited(), Duration::ZERO);
    }
}
