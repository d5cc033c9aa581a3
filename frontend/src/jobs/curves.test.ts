import { describe, expect, it } from 'vitest';
import type { HeldOutMetric, TrainingProgress } from '../api/types';
import { hasLoss, heldOut, heldOutLabel, metricDirection, trainingByRound } from './curves';

type Task = TrainingProgress['tasks'][number];
type Point = Task['points'][number];

const AT = '2026-12-05T00:00:00Z';
const point = (attempt: number, step: number, loss: number | null, total = 10): Point => ({
  attempt,
  step,
  total_steps: total,
  loss,
  tokens_per_second: loss === null ? 120 : null,
  recorded_at: AT,
});
const task = (id: string, round: number, shard: number, points: Point[], attempts = 1, status: Task['status'] = 'leased'): Task => ({
  task_id: id,
  round,
  shard,
  status,
  attempts,
  points,
});

describe('trainingByRound', () => {
  it('groups the curves by round and shard, each attempt its own line, loss-less points left out', () => {
    const progress: TrainingProgress = {
      job_id: 'job',
      tasks: [
        // Served out of order: the page orders them.
        task('t2', 2, 0, [point(1, 2, 0.5, 20)]),
        task('t1', 1, 1, [point(1, 3, 0.8), point(1, 1, 1.2), point(1, 2, null)]),
        task('t0', 1, 0, [point(1, 1, 1.4), point(1, 4, 1.1), point(2, 1, 1.3), point(2, 2, 0.9)], 2),
        task('t3', 2, 1, []),
      ],
      rounds: [{ round: 1, metric: 1.25, base_metric: 1.9, metric_name: 'loss', recorded_at: AT }],
    };
    const rounds = trainingByRound(progress);
    expect(rounds.map((r) => [r.round, r.tasks, r.totalSteps])).toEqual([
      [1, 2, 10],
      [2, 2, 20],
    ]);
    const [first, second] = rounds;
    expect(first!.series.map((s) => [s.shard, s.attempt, s.latest])).toEqual([
      [0, 1, false],
      [0, 2, true],
      [1, 1, true],
    ]);
    // By step, and the throughput-only heartbeat (step 2, no loss) is not a point.
    expect(first!.series[2]!.points).toEqual([
      { step: 1, loss: 1.2 },
      { step: 3, loss: 0.8 },
    ]);
    expect(first!.heldOut).toEqual({ metric: 1.25, base: 1.9, name: 'loss', direction: 'lower', improved: true });
    // A task with no points yet is counted, not drawn; no merge yet, no held-out metric.
    expect(second!.series.map((s) => s.taskId)).toEqual(['t2']);
    expect(second!.heldOut).toBeNull();
    expect(hasLoss(rounds)).toBe(true);
  });

  it('keeps a merged round that has no task listed, and knows when nothing has a loss', () => {
    const rounds = trainingByRound({
      job_id: 'job',
      tasks: [task('t0', 1, 0, [point(1, 0, null)])],
      rounds: [{ round: 2, metric: 0.8, base_metric: 0.6, metric_name: 'accuracy', recorded_at: AT }],
    });
    expect(rounds.map((r) => r.round)).toEqual([1, 2]);
    expect(rounds[1]!.heldOut?.improved).toBe(true);
    expect(hasLoss(rounds)).toBe(false);
  });
});

describe('held-out metric', () => {
  // A metric a newer server names and this build does not know.
  const unknown = (name: string) => name as HeldOutMetric;

  it('knows which way each of the API’s metrics improves, and no direction for another', () => {
    expect(metricDirection('loss')).toBe('lower');
    expect(metricDirection('dpo_loss')).toBe('lower');
    expect(metricDirection('accuracy')).toBe('higher');
    expect(metricDirection(unknown('score'))).toBeNull();
  });

  it('labels the metric by its name and direction', () => {
    expect(heldOutLabel('loss')).toBe('held-out loss (lower is better)');
    expect(heldOutLabel('accuracy')).toBe('held-out accuracy (higher is better)');
    expect(heldOutLabel(unknown('score'))).toBe('held-out score');
    expect(heldOutLabel(unknown(''))).toBe('held-out metric');
  });

  it('says whether the merge beat the base, in the metric’s direction', () => {
    expect(heldOut(1.3, 1.2, 'loss').improved).toBe(false);
    expect(heldOut(0.7, 0.8, 'accuracy').improved).toBe(false);
    expect(heldOut(0.9, 0.8, 'accuracy').improved).toBe(true);
    expect(heldOut(0.9, 0.8, unknown('score')).improved).toBeNull();
  });
});
