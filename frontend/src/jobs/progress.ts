// A job's story, folded from its event feed (`GET /v1/jobs/{id}/events`, and the same events
// live over SSE). Event kinds and payloads are the API's; kinds this portal does not know are
// kept and shown as they are, so a newer server never hides what happened.

export interface JobEvent {
  id: number;
  kind: string;
  payload: unknown;
  created_at: string;
}

export interface Claim {
  shard: number;
  worker: string;
}

export interface SubmissionView {
  submission_id: string;
  round: number;
  shard: number;
  worker: string;
  samples: number | null;
  verdict: Verdict | null;
}

export interface Verdict {
  accepted: boolean;
  quality: number | null;
  reason: string | null;
  metric: number | null;
  base_metric: number | null;
}

export interface RoundView {
  round: number;
  tasks: number | null;
  claims: Claim[];
  submissions: SubmissionView[];
  aggregated: { adapter_cid: string | null; metric: number | null; base_metric: number | null; accepted: boolean | null } | null;
}

export interface Payout {
  address: string;
  amount_wei: string;
  /** The contributor's reputation after this payout, as the escrow's event reports it. */
  reputation: number | null;
}

export interface JobProgress {
  rounds: RoundView[];
  funded: { escrow_job_id: string | null; tx_hash: string | null } | null;
  completed: { adapter_cid: string | null; tx_hash: string | null; payouts: Payout[] } | null;
  refunded: { tx_hash: string | null } | null;
  cancelled: boolean;
  /** Events of kinds not modelled here, in order. */
  other: JobEvent[];
  lastEventId: number | null;
}

export const EMPTY_PROGRESS: JobProgress = {
  rounds: [],
  funded: null,
  completed: null,
  refunded: null,
  cancelled: false,
  other: [],
  lastEventId: null,
};

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Obj) : {});
const str = (v: unknown): string | null => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : null);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const bool = (v: unknown): boolean | null => (typeof v === 'boolean' ? v : null);

function round(progress: JobProgress, n: number): RoundView {
  let r = progress.rounds.find((x) => x.round === n);
  if (!r) {
    r = { round: n, tasks: null, claims: [], submissions: [], aggregated: null };
    progress.rounds.push(r);
    progress.rounds.sort((a, b) => a.round - b.round);
  }
  return r;
}

/** Folds events in id order; an event already folded (same or lower id) is ignored. */
export function applyEvents(previous: JobProgress, events: readonly JobEvent[]): JobProgress {
  // Copy-on-write at the top level and per round keeps React's change detection cheap.
  const p: JobProgress = {
    ...previous,
    rounds: previous.rounds.map((r) => ({ ...r, claims: [...r.claims], submissions: r.submissions.map((s) => ({ ...s })) })),
    other: [...previous.other],
  };
  for (const event of events) {
    if (p.lastEventId !== null && event.id <= p.lastEventId) continue;
    p.lastEventId = event.id;
    const d = obj(event.payload);
    switch (event.kind) {
      case 'created':
        break;
      case 'funded':
        p.funded = { escrow_job_id: str(d.escrow_job_id), tx_hash: str(d.tx_hash) };
        break;
      case 'round_opened': {
        const r = round(p, num(d.round) ?? 0);
        r.tasks = num(d.tasks);
        break;
      }
      case 'task_claimed': {
        const r = round(p, num(d.round) ?? 0);
        const shard = num(d.shard) ?? -1;
        r.claims = r.claims.filter((c) => c.shard !== shard);
        r.claims.push({ shard, worker: str(d.worker) ?? '' });
        break;
      }
      case 'submitted': {
        const r = round(p, num(d.round) ?? 0);
        const id = str(d.submission_id) ?? `event-${event.id}`;
        r.submissions = r.submissions.filter((s) => s.submission_id !== id);
        r.submissions.push({
          submission_id: id,
          round: r.round,
          shard: num(d.shard) ?? -1,
          worker: str(d.worker) ?? '',
          samples: num(d.samples),
          verdict: null,
        });
        break;
      }
      case 'verdict': {
        const id = str(d.submission_id);
        const verdict: Verdict = {
          accepted: bool(d.accepted) ?? false,
          quality: num(d.quality),
          reason: str(d.reason),
          // The validator's scores travel in the verdict's `report`.
          metric: num(obj(d.report).metric) ?? num(d.metric),
          base_metric: num(obj(d.report).base_metric) ?? num(d.base_metric),
        };
        const target = p.rounds.flatMap((r) => r.submissions).find((s) => s.submission_id === id);
        if (target) target.verdict = verdict;
        else p.other.push(event);
        break;
      }
      case 'aggregated': {
        const r = round(p, num(d.round) ?? 0);
        r.aggregated = {
          adapter_cid: str(d.adapter_cid),
          metric: num(d.metric),
          base_metric: num(d.base_metric),
          accepted: bool(d.accepted),
        };
        break;
      }
      case 'completed':
        p.completed = {
          adapter_cid: str(d.adapter_cid),
          tx_hash: str(d.tx_hash),
          payouts: (Array.isArray(d.payouts) ? d.payouts : []).map((x) => {
            const o = obj(x);
            return { address: str(o.address) ?? '', amount_wei: str(o.amount_wei) ?? '0', reputation: num(o.reputation) };
          }),
        };
        break;
      case 'refunded':
        p.refunded = { tx_hash: str(d.tx_hash) };
        break;
      case 'cancelled':
        p.cancelled = true;
        break;
      default:
        p.other.push(event);
    }
  }
  return p;
}

/** "3/5 contributors done" for a round: shards whose submission was accepted, of its tasks. */
export function roundDone(r: RoundView): { done: number; total: number | null } {
  const accepted = new Set(r.submissions.filter((s) => s.verdict?.accepted).map((s) => s.shard));
  return { done: accepted.size, total: r.tasks };
}

/** The points of the held-out metric chart: one per aggregated round, with the base model's. */
export function metricSeries(progress: JobProgress): { round: number; metric: number; base: number | null }[] {
  return progress.rounds
    .filter((r) => r.aggregated?.metric !== null && r.aggregated?.metric !== undefined)
    .map((r) => ({ round: r.round, metric: r.aggregated!.metric!, base: r.aggregated!.base_metric }));
}
