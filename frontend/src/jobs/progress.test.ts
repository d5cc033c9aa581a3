import { describe, expect, it } from 'vitest';
import type { EventView, JobEvent } from '../api/types';
import { applyEvents, EMPTY_PROGRESS, metricName, metricSeries, pendingProofs, roundDone } from './progress';

let id = 0;
/** An event of `kind` as the feed serves it, with the next id. */
function ev<K extends JobEvent['kind']>(kind: K, payload: Extract<JobEvent, { kind: K }>['payload']): EventView {
  return { id: ++id, kind, payload, created_at: '2026-11-22T00:00:00Z' } as EventView;
}

const TASK = ['7d3c0f7e-0000-4000-8000-000000000000', '7d3c0f7e-0000-4000-8000-000000000001'] as const;
const LEASE = '2026-11-22T00:10:00Z';

const opened = (round: number, tasks: number) => ev('round_opened', { round, tasks, base_adapter_cid: null });
const claimed = (round: number, shard: number, worker: string) =>
  ev('task_claimed', { task_id: TASK[0], round, shard, worker, attempt: 1, lease_expires_at: LEASE });

describe('applyEvents', () => {
  it('follows a federated job from funding to payout', () => {
    const events = [
      ev('created', { to: 'awaiting_funding', manifest_cid: 'bafyM', spec_cid: 'bafyS', dataset_cid: 'bafyD', held_out_records: 10, shard_records: [40, 41] }),
      ev('funded', { from: 'awaiting_funding', to: 'open', escrow_job_id: '4', tx_hash: '0xf', escrow: '0xe', dev_funded: false }),
      ev('started', { tx_hash: '0x5' }),
      opened(1, 2),
      claimed(1, 0, '0xa'),
      claimed(1, 1, '0xb'),
      ev('submitted', { task_id: TASK[0], round: 1, shard: 0, worker: '0xa', submission_id: 's1', samples: 40, adapter_cid: 'bafy1' }),
      ev('submitted', { task_id: TASK[1], round: 1, shard: 1, worker: '0xb', submission_id: 's2', samples: 41, adapter_cid: 'bafy2' }),
      ev('verdict', {
        task_id: TASK[0],
        round: 1,
        submission_id: 's1',
        worker: '0xa',
        accepted: true,
        quality: 0.8,
        reason: null,
        report: { metric: 0.7, base_metric: 0.5, held_out_examples: 8 },
      }),
      ev('verdict', {
        task_id: TASK[1],
        round: 1,
        submission_id: 's2',
        worker: '0xb',
        accepted: false,
        quality: 0,
        reason: 'no improvement',
        report: { metric: 0.4, base_metric: 0.5 },
      }),
      ev('aggregated', { round: 1, adapter_cid: 'bafyA', metric: 0.72, base_metric: 0.5, metric_name: 'accuracy', details: {} }),
      ev('finalize', { adapter_cid: 'bafyA', contributions: [] }),
      ev('completed', {
        from: 'open',
        to: 'completed',
        adapter_cid: 'bafyA',
        tx_hash: '0xc',
        payouts: [{ address: '0xa', amount_wei: '900', reputation: 120 }],
        fee_wei: '100',
        dust_wei: '0',
      }),
    ];
    const p = applyEvents(EMPTY_PROGRESS, events);
    expect(p.funded).toEqual({ escrow_job_id: '4', tx_hash: '0xf' });
    expect(p.rounds).toHaveLength(1);
    const r = p.rounds[0]!;
    expect(r.claims).toHaveLength(2);
    expect(r.submissions.map((s) => s.verdict?.accepted)).toEqual([true, false]);
    expect(r.submissions[0]!.verdict).toEqual({
      accepted: true,
      quality: 0.8,
      reason: null,
      metric: 0.7,
      base_metric: 0.5,
      examples: 8,
      validator: null,
      proof: 'not_due',
      proof_by: null,
      proof_reason: null,
    });
    expect(r.submissions[1]!.verdict?.reason).toBe('no improvement');
    expect(r.aggregated).toEqual({ adapter_cid: 'bafyA', metric: 0.72, base_metric: 0.5, metric_name: 'accuracy' });
    expect(metricName(p)).toBe('accuracy');
    expect(roundDone(r)).toEqual({ done: 1, total: 2 });
    expect(metricSeries(p)).toEqual([{ round: 1, metric: 0.72, base: 0.5 }]);
    expect(p.completed?.payouts).toEqual([{ address: '0xa', amount_wei: '900', reputation: 120 }]);
    expect(p.other.map((e) => e.kind)).toEqual(['started', 'finalize']);
    expect(p.lastEventId).toBe(id);
  });

  it('follows proofs of training checked after their verdicts, up to the payout', () => {
    const verdict = (submission_id: string, task: 0 | 1, worker: string) =>
      ev('verdict', {
        task_id: TASK[task],
        round: 1,
        submission_id,
        worker,
        accepted: true,
        quality: 0.9,
        reason: null,
        report: {},
        validator: '0xv1',
        proof: 'pending',
      });
    const checked = (submission_id: string, task: 0 | 1, worker: string, passed: boolean, pending: number) =>
      ev('proof_checked', {
        submission_id,
        task_id: TASK[task],
        round: 1,
        worker,
        validator: '0xv2',
        proof: passed ? 'passed' : 'failed',
        reason: passed ? null : 'stretch 2 does not replay',
        stretches: [{ stretch: 1, steps: [3, 4], cosine: 1, norm_ratio: 1, loss_gap: 0, seconds: 2.5 }],
        pending,
      });
    let p = applyEvents(EMPTY_PROGRESS, [
      opened(1, 2),
      ev('submitted', { task_id: TASK[0], round: 1, shard: 0, worker: '0xa', submission_id: 's1', samples: 3, adapter_cid: 'bafy1' }),
      ev('submitted', { task_id: TASK[1], round: 1, shard: 1, worker: '0xb', submission_id: 's2', samples: 3, adapter_cid: 'bafy2' }),
      verdict('s1', 0, '0xa'),
      verdict('s2', 1, '0xb'),
    ]);
    expect(pendingProofs(p)).toBe(2);
    expect(p.awaitingProofs).toBeNull();
    p = applyEvents(p, [
      checked('s1', 0, '0xa', true, 1),
      ev('aggregated', { round: 1, adapter_cid: 'bafyA', metric: 0.7, base_metric: 0.5, metric_name: 'accuracy', details: {} }),
      ev('awaiting_proofs', { pending: 1 }),
    ]);
    expect(p.awaitingProofs).toBe(1);
    expect(pendingProofs(p)).toBe(1);
    p = applyEvents(p, [checked('s2', 1, '0xb', false, 0)]);
    const [s1, s2] = p.rounds[0]!.submissions;
    expect(s1!.verdict).toMatchObject({ validator: '0xv1', proof: 'passed', proof_by: '0xv2' });
    expect(s2!.verdict).toMatchObject({ proof: 'failed', proof_reason: 'stretch 2 does not replay' });
    expect(p.awaitingProofs).toBe(0);
    expect(pendingProofs(p)).toBe(0);
  });

  it('reads a verdict report without the scores as unmeasured', () => {
    const p = applyEvents(EMPTY_PROGRESS, [
      opened(1, 1),
      ev('submitted', { task_id: TASK[0], round: 1, shard: 0, worker: '0xa', submission_id: 's1', samples: 3, adapter_cid: 'bafy1' }),
      ev('verdict', {
        task_id: TASK[0],
        round: 1,
        submission_id: 's1',
        worker: '0xa',
        accepted: false,
        quality: 0,
        reason: 'norm too large',
        // Not what the typed report allows: what a broken or hostile server might still send.
        report: { metric: 'n/a' as unknown as number },
      }),
    ]);
    expect(p.rounds[0]!.submissions[0]!.verdict).toMatchObject({ metric: null, base_metric: null, examples: null });
  });

  it('ignores events it has already folded (a resumed stream may repeat them)', () => {
    const open = opened(1, 3);
    const once = applyEvents(EMPTY_PROGRESS, [open]);
    const twice = applyEvents(once, [open, claimed(1, 2, '0xc')]);
    expect(twice.rounds).toHaveLength(1);
    expect(twice.rounds[0]!.claims).toEqual([{ shard: 2, worker: '0xc' }]);
  });

  it('keeps kinds it does not model, and those of a newer server, in order', () => {
    const requeued = ev('task_requeued', { task_id: TASK[0], round: 1, attempts: 1, max_attempts: 3, reason: 'lease expired' });
    // A kind the generated types do not name yet, as a newer server would send it.
    const newer = { id: ++id, kind: 'lease_revoked', payload: { shard: 1 }, created_at: '2026-11-22T00:00:00Z' } as unknown as EventView;
    const p = applyEvents(EMPTY_PROGRESS, [requeued, newer]);
    expect(p.other).toEqual([requeued, newer]);
    expect(p.rounds).toEqual([]);
  });

  it('keeps a verdict on a submission it has not seen', () => {
    const verdict = ev('verdict', {
      task_id: TASK[0],
      round: 1,
      submission_id: 'unseen',
      worker: '0xa',
      accepted: true,
      quality: 1,
      report: {},
    });
    expect(applyEvents(EMPTY_PROGRESS, [verdict]).other).toEqual([verdict]);
  });

  it('records a refund and a cancellation', () => {
    const refunded = applyEvents(EMPTY_PROGRESS, [ev('refunded', { from: 'open', to: 'refunded', tx_hash: '0xr', stake_wei: '5' })]);
    expect(refunded.refunded).toEqual({ tx_hash: '0xr', reason: null, stake_wei: '5' });
    const aborted = applyEvents(EMPTY_PROGRESS, [
      ev('refunded', { from: 'open', to: 'refunded', tx_hash: '0xa', stake_wei: '7', reason: 'task t used up its 3 attempts' }),
    ]);
    expect(aborted.refunded).toEqual({ tx_hash: '0xa', reason: 'task t used up its 3 attempts', stake_wei: '7' });
    const cancelled = applyEvents(EMPTY_PROGRESS, [ev('cancelled', { from: 'awaiting_funding', to: 'cancelled', by: '0xq' })]);
    expect(cancelled.cancelled).toBe(true);
  });

  it('does not change the progress it was given', () => {
    const base = applyEvents(EMPTY_PROGRESS, [opened(1, 1)]);
    const snapshot = JSON.stringify(base);
    applyEvents(base, [claimed(1, 0, '0xa')]);
    expect(JSON.stringify(base)).toBe(snapshot);
  });
});
