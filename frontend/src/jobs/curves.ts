// A job's training, shaped for its charts: the loss each task's worker reported with its
// heartbeats (`GET /v1/jobs/{id}/progress`), one line per task and attempt, grouped by round
// beside that round's held-out metric. The API serves points by task; the page draws by round.
import type { HeldOutMetric, TrainingProgress } from '../api/types';

export interface LossPoint {
  step: number;
  loss: number;
}

export interface LossSeries {
  /** Unique per task and attempt (a React key, and the chart's series id). */
  key: string;
  taskId: string;
  shard: number;
  attempt: number;
  /** False for an attempt the task has since started again (a lost lease, a rejected adapter). */
  latest: boolean;
  status: string;
  points: LossPoint[];
}

/** Which way a held-out metric improves; null for a metric this portal does not know. */
export type Direction = 'lower' | 'higher' | null;

export interface HeldOut {
  metric: number;
  base: number;
  name: HeldOutMetric;
  direction: Direction;
  /** Whether the merge beat the base model; null when the direction is unknown. */
  improved: boolean | null;
}

export interface RoundTraining {
  round: number;
  /** Only tasks whose worker reported a loss, by shard then attempt. */
  series: LossSeries[];
  /** Tasks in the round, reporting or not. */
  tasks: number;
  /** The x axis' extent: the largest total step count reported in the round. */
  totalSteps: number;
  heldOut: HeldOut | null;
}

/**
 * Which way each of the API's held-out metrics improves (`HeldOutMetric::lower_is_better` in
 * core/src/protocol/metric.rs). Keyed by the generated type, so a metric added to the API fails
 * the typecheck until it is placed here.
 */
const DIRECTION: Record<HeldOutMetric, 'lower' | 'higher'> = {
  loss: 'lower',
  accuracy: 'higher',
  dpo_loss: 'lower',
};

/** `loss` and `dpo_loss` are lower-is-better, `accuracy` higher-is-better. */
export function metricDirection(name: HeldOutMetric): Direction {
  // A newer server may name a metric this build does not know: no direction, no verdict.
  return DIRECTION[name] ?? null;
}

/** "held-out loss (lower is better)". */
export function heldOutLabel(name: HeldOutMetric): string {
  const direction = metricDirection(name);
  const what = `held-out ${name || 'metric'}`;
  return direction ? `${what} (${direction} is better)` : what;
}

export function heldOut(metric: number, base: number, name: HeldOutMetric): HeldOut {
  const direction = metricDirection(name);
  const improved = direction === 'lower' ? metric < base : direction === 'higher' ? metric > base : null;
  return { metric, base, name, direction, improved };
}

/**
 * Per round (every round with a task or a merge, in order): one series per task and attempt
 * with the points that carry a loss, by step; and the round's held-out metric once merged.
 */
export function trainingByRound(progress: TrainingProgress): RoundTraining[] {
  const rounds = new Map<number, RoundTraining>();
  const at = (round: number): RoundTraining => {
    let r = rounds.get(round);
    if (!r) {
      r = { round, series: [], tasks: 0, totalSteps: 0, heldOut: null };
      rounds.set(round, r);
    }
    return r;
  };
  for (const task of progress.tasks) {
    const r = at(task.round);
    r.tasks += 1;
    const byAttempt = new Map<number, LossPoint[]>();
    for (const p of task.points) {
      r.totalSteps = Math.max(r.totalSteps, p.total_steps, p.step);
      // Throughput-only heartbeats have nothing to plot on a loss chart.
      if (p.loss === null || p.loss === undefined || !Number.isFinite(p.loss)) continue;
      let points = byAttempt.get(p.attempt);
      if (!points) byAttempt.set(p.attempt, (points = []));
      points.push({ step: p.step, loss: p.loss });
    }
    const last = Math.max(task.attempts, ...byAttempt.keys());
    for (const [attempt, points] of [...byAttempt].sort(([a], [b]) => a - b)) {
      points.sort((a, b) => a.step - b.step);
      r.series.push({
        key: `${task.task_id}/${attempt}`,
        taskId: task.task_id,
        shard: task.shard,
        attempt,
        latest: attempt === last,
        status: task.status,
        points,
      });
    }
  }
  for (const m of progress.rounds) at(m.round).heldOut = heldOut(m.metric, m.base_metric, m.metric_name);
  const out = [...rounds.values()].sort((a, b) => a.round - b.round);
  for (const r of out) r.series.sort((a, b) => a.shard - b.shard || a.attempt - b.attempt);
  return out;
}

/** Whether any task of the job has reported a loss yet. */
export function hasLoss(rounds: readonly RoundTraining[]): boolean {
  return rounds.some((r) => r.series.length > 0);
}
