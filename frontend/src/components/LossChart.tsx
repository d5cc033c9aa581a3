// A round's training loss, hand-drawn in SVG: one line per task (its shard's colour) from the
// loss its worker reported with each heartbeat, by optimizer step. An attempt the task has
// since started again is drawn dashed and faint. A table with the last figures follows for
// screen readers and for anyone who wants the numbers.
import { useId } from 'react';
import type { LossSeries } from '../jobs/curves';
import { yScale } from './MetricChart';

const W = 560;
const H = 220;
const PAD = { left: 52, right: 16, top: 14, bottom: 36 };
/** Series colours (styles.css: .series-0 … .series-5), cycled by shard. */
export const SERIES_COLOURS = 6;

/** Ticks from 0 to at least `total` in round steps: 0, 25, 50, … */
export function stepTicks(total: number): number[] {
  const end = Math.max(1, total);
  const raw = end / 4;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  // Steps are whole numbers: no 2.5 among the multipliers, and never a step below 1.
  const step = Math.max(1, [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? raw);
  const ticks: number[] = [];
  for (let t = 0; t < end + step; t += step) {
    ticks.push(Number(t.toPrecision(12)));
    if (t >= end) break;
  }
  return ticks;
}

/** The SVG path through `points` (in step order), in chart coordinates. */
export function linePath(points: readonly { step: number; loss: number }[], x: (s: number) => number, y: (v: number) => number): string {
  return points.map((p, i) => `${i ? 'L' : 'M'}${x(p.step).toFixed(1)},${y(p.loss).toFixed(1)}`).join(' ');
}

export function LossChart({ series, totalSteps, label }: { series: LossSeries[]; totalSteps: number; label: string }) {
  const titleId = useId();
  if (series.length === 0) {
    return <p className="muted">No worker has reported a training loss in this round yet; each heartbeat adds a point.</p>;
  }
  const losses = series.flatMap((s) => s.points.map((p) => p.loss));
  const scale = yScale(losses);
  const ticks = stepTicks(Math.max(totalSteps, ...series.flatMap((s) => s.points.map((p) => p.step))));
  const xEnd = ticks[ticks.length - 1]!;
  const x = (step: number) => PAD.left + (step / xEnd) * (W - PAD.left - PAD.right);
  const y = (v: number) => PAD.top + (1 - (v - scale.min) / (scale.max - scale.min)) * (H - PAD.top - PAD.bottom);
  const latest = series.filter((s) => s.latest);
  return (
    <figure className="chart" data-testid="loss-chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby={titleId}>
        <title id={titleId}>{label}</title>
        {scale.ticks.map((t) => (
          <g key={t}>
            <line x1={PAD.left} x2={W - PAD.right} y1={y(t)} y2={y(t)} className="chart-grid" />
            <text x={PAD.left - 8} y={y(t) + 4} textAnchor="end" className="chart-tick">
              {t}
            </text>
          </g>
        ))}
        {ticks.map((t) => (
          <text key={t} x={x(t)} y={H - PAD.bottom + 18} textAnchor="middle" className="chart-tick">
            {t}
          </text>
        ))}
        <text x={(PAD.left + W - PAD.right) / 2} y={H - 4} textAnchor="middle" className="chart-axis">
          step
        </text>
        {series.map((s) => {
          const colour = `series-${s.shard % SERIES_COLOURS}`;
          const end = s.points[s.points.length - 1]!;
          return (
            <g key={s.key} className={`${colour}${s.latest ? '' : ' loss-earlier'}`} data-series={s.key}>
              <path d={linePath(s.points, x, y)} className="loss-line" fill="none">
                <title>{`shard ${s.shard}, attempt ${s.attempt}`}</title>
              </path>
              <circle cx={x(end.step)} cy={y(end.loss)} r={3.5} className="loss-end">
                <title>{`shard ${s.shard}, step ${end.step}: loss ${end.loss}`}</title>
              </circle>
            </g>
          );
        })}
      </svg>
      <figcaption>
        {latest.map((s) => (
          <span key={s.key} className={`legend legend--series series-${s.shard % SERIES_COLOURS}`}>
            shard {s.shard}
          </span>
        ))}
        {latest.length < series.length && <span className="legend legend--earlier">earlier attempt</span>}
      </figcaption>
      <table className="sr-only">
        <caption>{label}</caption>
        <thead>
          <tr>
            <th scope="col">Shard</th>
            <th scope="col">Attempt</th>
            <th scope="col">Points</th>
            <th scope="col">Last step</th>
            <th scope="col">Last loss</th>
          </tr>
        </thead>
        <tbody>
          {series.map((s) => {
            const end = s.points[s.points.length - 1]!;
            return (
              <tr key={s.key}>
                <td>{s.shard}</td>
                <td>{s.attempt}</td>
                <td>{s.points.length}</td>
                <td>{end.step}</td>
                <td>{end.loss}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </figure>
  );
}
