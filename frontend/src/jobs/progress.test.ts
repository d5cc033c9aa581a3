import { describe, expect, it } from 'vitest';
import { applyEvents, EMPTY_PROGRESS, metricSeries, roundDone, type JobEvent } from './progress';

let id = 0;
const ev = (kind: string, payload: unknown): JobEvent => ({ id: ++id, kind, payload, created_at: '2026-11-22T00:00:00Z' });

describe('applyEvents', () => {
  it('follows a federated job from funding to payout', () => {
    const events = [
      ev('created', { manifest_cid: 'bafy' }),
      ev('funded', { escrow_job_id: '4', tx_hash: '0xf' }),
      ev('round_opened', { round: 1, tasks: 2 }),
      ev('task_claimed', { round: 1, shard: 0, worker: '0xa' }),
      ev('task_claimed', { round: 1, shard: 1, worker: '0xb' }),
      ev('submitted', { round: 1, shard: 0, worker: '0xa', submission_id: 's1', samples: 40 }),
      ev('submitted', { round: 1, shard: 1, worker: '0xb', submission_id: 's2', samples: 41 }),
      ev('verdict', { submission_id: 's1', worker: '0xa', accepted: true, quality: 0.8, reason: null, report: { metric: 0.7, base_metric: 0.5 } }),
      ev('verdict', { submission_id: 's2', worker: '0xb', accepted: false, quality: 0, reason: 'no improvement', report: { metric: 0.4, base_metric: 0.5 } }),
      ev('aggregated', { round: 1, adapter_cid: 'bafyA', metric: 0.72, base_metric: 0.5, accepted: true }),
      ev('completed', { adapter_cid: 'bafyA', tx_hash: '0xc', payouts: [{ address: '0xa', amount_wei: '900', reputation: 120 }] }),
    ];
    const p = applyEvents(EMPTY_PROGRESS, events);
    expect(p.funded).toEqual({ escrow_job_id: '4', tx_hash: '0xf' });
    expect(p.rounds).toHaveLength(1);
    const r = p.rounds[0]!;
    expect(r.claims).toHaveLength(2);
    expect(r.submissions.map((s) => s.verdict?.accepted)).toEqual([true, false]);
    expect(r.submissions[1]!.verdict?.reason).toBe('no improvement');
    expect(roundDone(r)).toEqual({ done: 1, total: 2 });
    expect(metricSeries(p)).toEqual([{ round: 1, metric: 0.72, base: 0.5 }]);
    expect(p.completed?.payouts).toEqual([{ address: '0xa', amount_wei: '900', reputation: 120 }]);
    expect(p.lastEventId).toBe(id);
  });

  it('ignores events it has already folded (a resumed stream may repeat them)', () => {
    const open = ev('round_opened', { round: 1, tasks: 3 });
    const once = applyEvents(EMPTY_PROGRESS, [open]);
    const twice = applyEvents(once, [open, ev('task_claimed', { round: 1, shard: 2, worker: '0xc' })]);
    expect(twice.rounds).toHaveLength(1);
    expect(twice.rounds[0]!.claims).toEqual([{ shard: 2, worker: '0xc' }]);
  });

  it('keeps unknown kinds and malformed payloads without throwing', () => {
    const p = applyEvents(EMPTY_PROGRESS, [ev('lease_expired', { shard: 1 }), ev('round_opened', 'garbage'), ev('completed', null)]);
    expect(p.other.map((e) => e.kind)).toEqual(['lease_expired']);
    expect(p.rounds[0]).toMatchObject({ round: 0, tasks: null });
    expect(p.completed).toEqual({ adapter_cid: null, tx_hash: null, payouts: [] });
  });

  it('does not change the progress it was given', () => {
    const base = applyEvents(EMPTY_PROGRESS, [ev('round_opened', { round: 1, tasks: 1 })]);
    const snapshot = JSON.stringify(base);
    applyEvents(base, [ev('task_claimed', { round: 1, shard: 0, worker: '0xa' })]);
    expect(JSON.stringify(base)).toBe(snapshot);
  });
});
