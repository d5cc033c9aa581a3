// A job's story, folded from its event feed (`GET /v1/jobs/{id}/events`, and the same events
// live over SSE). Event kinds and payloads are the API's generated types; a kind those types do
// not name is kept and shown as it is, so a newer server never hides what happened.
import type { EventView, HeldOutMetric, ProofStatus } from '../api/types';

export interface Claim {
  shard: number;
  worker: string;
}

export interface SubmissionView {
  submission_id: string;
  round: number;
  shard: number;
  worker: string;
  samples: number;
  verdict: Verdict | null;
}

export interface Verdict {
  accepted: boolean;
  quality: number;
  reason: string | null;
  /** From the verdict's report: null where the validator did not measure it. */
  metric: number | null;
  base_metric: number | null;
  /** How many held-out examples the verdict scored (the round's sample; metric and base are over them). */
  examples: number | null;
  /** The validator that judged it (null in events recorded before validators were named). */
  validator: string | null;
  /** Its proof of training: `pending` until a validator replays a stretch of the run, after the verdict. */
  proof: ProofStatus;
  /** The validator that replayed it, once decided. */
  proof_by: string | null;
  /** Why the proof failed. */
  proof_reason: string | null;
}

export interface RoundView {
  round: number;
  /** Null until the round's `round_opened` is seen (a claim may be folded first). */
  tasks: number | null;
  claims: Claim[];
  submissions: SubmissionView[];
  aggregated: { adapter_cid: string; metric: number; base_metric: number; metric_name: HeldOutMetric } | null;
}

export interface Payout {
  address: string;
  amount_wei: string;
  /** The contributor's reputation after this payout, as the escrow's event reports it. */
  reputation: number;
}

export interface JobProgress {
  rounds: RoundView[];
  funded: { escrow_job_id: string; tx_hash: string } | null;
  completed: { adapter_cid: string; tx_hash: string; payouts: Payout[] } | null;
  /** The refund, with why: the deadline passed, or the job was ended early (a task used up its attempts). */
  refunded: { tx_hash: string; reason: string | null; stake_wei: string } | null;
  cancelled: boolean;
  /** Proofs of training the payout still waits for, once the last round is merged; null before. */
  awaitingProofs: number | null;
  /** Events of kinds not modelled here, in order. */
  other: EventView[];
  lastEventId: number | null;
}

export const EMPTY_PROGRESS: JobProgress = {
  rounds: [],
  funded: null,
  completed: null,
  refunded: null,
  cancelled: false,
  awaitingProofs: null,
  other: [],
  lastEventId: null,
};

/** A score from a verdict's report; null where the validator measured none (or sent no number). */
const finite = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

function round(progress: JobProgress, n: number): RoundView {
  let r = progress.rounds.find((x) => x.round === n);
  if (!r) {
    r = { round: n, tasks: null, claims: [], submissions: [], aggregated: null };
    progress.rounds.push(r);
    progress.rounds.sort((a, b) => a.round - b.round);
  }
  return r;
}

/**
 * An event whose kind the generated types do not name, which only a server newer than this
 * portal sends. Typed `never` so that a kind added to the API fails the typecheck until
 * applyEvents decides what to do with it.
 */
function newerKind(event: never): EventView {
  return event;
}

/** Folds events in id order; an event already folded (same or lower id) is ignored. */
export function applyEvents(previous: JobProgress, events: readonly EventView[]): JobProgress {
  // Copy-on-write at the top level and per round keeps React's change detection cheap.
  const p: JobProgress = {
    ...previous,
    rounds: previous.rounds.map((r) => ({ ...r, claims: [...r.claims], submissions: r.submissions.map((s) => ({ ...s })) })),
    other: [...previous.other],
  };
  for (const event of events) {
    if (p.lastEventId !== null && event.id <= p.lastEventId) continue;
    p.lastEventId = event.id;
    switch (event.kind) {
      case 'created':
        break;
      case 'funded':
        p.funded = { escrow_job_id: event.payload.escrow_job_id, tx_hash: event.payload.tx_hash };
        break;
      case 'round_opened': {
        const r = round(p, event.payload.round);
        r.tasks = event.payload.tasks;
        break;
      }
      case 'task_claimed': {
        const { round: n, shard, worker } = event.payload;
        const r = round(p, n);
        r.claims = r.claims.filter((c) => c.shard !== shard);
        r.claims.push({ shard, worker });
        break;
      }
      case 'submitted': {
        const d = event.payload;
        const r = round(p, d.round);
        r.submissions = r.submissions.filter((s) => s.submission_id !== d.submission_id);
        r.submissions.push({
          submission_id: d.submission_id,
          round: r.round,
          shard: d.shard,
          worker: d.worker,
          samples: d.samples,
          verdict: null,
        });
        break;
      }
      case 'verdict': {
        const d = event.payload;
        const verdict: Verdict = {
          accepted: d.accepted,
          quality: d.quality,
          reason: d.reason ?? null,
          metric: finite(d.report?.metric),
          base_metric: finite(d.report?.base_metric),
          examples: finite(d.report?.held_out_examples),
          validator: d.validator ?? null,
          proof: d.proof ?? 'not_due',
          proof_by: null,
          proof_reason: null,
        };
        const target = p.rounds.flatMap((r) => r.submissions).find((s) => s.submission_id === d.submission_id);
        if (target) target.verdict = verdict;
        else p.other.push(event);
        break;
      }
      case 'proof_checked': {
        const d = event.payload;
        const target = p.rounds.flatMap((r) => r.submissions).find((s) => s.submission_id === d.submission_id);
        if (target?.verdict) {
          target.verdict = { ...target.verdict, proof: d.proof, proof_by: d.validator, proof_reason: d.reason ?? null };
        } else p.other.push(event);
        if (p.awaitingProofs !== null) p.awaitingProofs = d.pending;
        break;
      }
      case 'awaiting_proofs':
        p.awaitingProofs = event.payload.pending;
        break;
      case 'aggregated': {
        const d = event.payload;
        round(p, d.round).aggregated = {
          adapter_cid: d.adapter_cid,
          metric: d.metric,
          base_metric: d.base_metric,
          metric_name: d.metric_name,
        };
        break;
      }
      case 'completed': {
        const d = event.payload;
        p.completed = {
          adapter_cid: d.adapter_cid,
          tx_hash: d.tx_hash,
          payouts: d.payouts.map((x) => ({ address: x.address, amount_wei: x.amount_wei, reputation: x.reputation })),
        };
        break;
      }
      case 'refunded':
        p.refunded = {
          tx_hash: event.payload.tx_hash,
          reason: event.payload.reason ?? null,
          stake_wei: event.payload.stake_wei,
        };
        break;
      case 'cancelled':
        p.cancelled = true;
        break;
      // Kinds the page shows in its event log only.
      case 'funding_ignored':
      case 'started':
      case 'task_requeued':
      case 'task_failed':
      case 'round_ready':
      case 'finalize':
      case 'refund_due':
      case 'abort_due':
      case 'paid':
      case 'bond_slashed':
      case 'reorganised':
        p.other.push(event);
        break;
      default:
        p.other.push(newerKind(event));
    }
  }
  return p;
}

/** "3/5 contributors done" for a round: shards whose submission was accepted, of its tasks. */
export function roundDone(r: RoundView): { done: number; total: number | null } {
  const accepted = new Set(r.submissions.filter((s) => s.verdict?.accepted).map((s) => s.shard));
  return { done: accepted.size, total: r.tasks };
}

/** Submissions whose proofs of training are still to be replayed: the payout waits for them. */
export function pendingProofs(progress: JobProgress): number {
  return progress.rounds.flatMap((r) => r.submissions).filter((s) => s.verdict?.proof === 'pending').length;
}

/** The name of the held-out metric the validator scores merges by (`accuracy`, `loss`), once a round is merged. */
export function metricName(progress: JobProgress): HeldOutMetric | null {
  const merged = progress.rounds.filter((r) => r.aggregated);
  return merged.at(-1)?.aggregated?.metric_name ?? null;
}

/** The points of the held-out metric chart: one per aggregated round, with the base model's. */
export function metricSeries(progress: JobProgress): { round: number; metric: number; base: number | null }[] {
  return progress.rounds.flatMap((r) =>
    r.aggregated ? [{ round: r.round, metric: r.aggregated.metric, base: r.aggregated.base_metric }] : [],
  );
}
