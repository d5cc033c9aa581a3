// The held-out metric per round, hand-drawn in SVG: the merged adapter's score as a line with
// points, the base model's as a dashed reference. A table with the same numbers follows for
// screen readers and for anyone who wants the exact values.

export interface MetricPoint {
  round: number;
  metric: number;
  base: number | null;
}

const W = 560;
const H = 240;
const PAD = { left: 52, right: 16, top: 16, bottom: 36 };

export interface Scale {
  min: number;
  max: number;
  ticks: number[];
}

/** A y range covering every value with a little margin, and 5 round ticks. */
export function yScale(values: number[]): Scale {
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  const span = hi - lo || Math.abs(hi) || 1;
  const rawStep = (span * 1.2) / 4;
  const magnitude = 10 ** Math.floor(Math.log10(rawStep));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= rawStep) ?? rawStep;
  const min = Math.floor((lo - span * 0.1) / step) * step;
  const max = Math.ceil((hi + span * 0.1) / step) * step;
  const ticks: number[] = [];
  for (let t = min; t <= max + step / 2; t += step) ticks.push(Number(t.toPrecision(12)));
  return { min, max, ticks };
}

export function MetricChart({ points, label }: { points: MetricPoint[]; label: string }) {
  if (points.length === 0) {
    return <p className="muted">No round has been scored yet; the chart fills in as rounds are aggregated.</p>;
  }
  const bases = points.map((p) => p.base).filter((b): b is number => b !== null);
  const scale = yScale([...points.map((p) => p.metric), ...bases]);
  const rounds = points.map((p) => p.round);
  const r0 = Math.min(...rounds);
  const r1 = Math.max(...rounds);
  const x = (r: number) =>
    r1 === r0 ? (PAD.left + W - PAD.right) / 2 : PAD.left + ((r - r0) / (r1 - r0)) * (W - PAD.left - PAD.right);
  const y = (v: number) => PAD.top + (1 - (v - scale.min) / (scale.max - scale.min)) * (H - PAD.top - PAD.bottom);
  const line = points.map((p, i) => `${i ? 'L' : 'M'}${x(p.round).toFixed(1)},${y(p.metric).toFixed(1)}`).join(' ');
  const base = bases.length ? bases[bases.length - 1]! : null;
  return (
    <figure className="chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby="metric-chart-title">
        <title id="metric-chart-title">{label}</title>
        {scale.ticks.map((t) => (
          <g key={t}>
            <line x1={PAD.left} x2={W - PAD.right} y1={y(t)} y2={y(t)} className="chart-grid" />
            <text x={PAD.left - 8} y={y(t) + 4} textAnchor="end" className="chart-tick">
              {t}
            </text>
          </g>
        ))}
        {points.map((p) => (
          <text key={p.round} x={x(p.round)} y={H - PAD.bottom + 18} textAnchor="middle" className="chart-tick">
            {p.round}
          </text>
        ))}
        <text x={(PAD.left + W - PAD.right) / 2} y={H - 4} textAnchor="middle" className="chart-axis">
          round
        </text>
        {base !== null && (
          <line x1={PAD.left} x2={W - PAD.right} y1={y(base)} y2={y(base)} className="chart-base">
            <title>{`base model: ${base}`}</title>
          </line>
        )}
        <path d={line} className="chart-line" fill="none" />
        {points.map((p) => (
          <circle key={p.round} cx={x(p.round)} cy={y(p.metric)} r={4} className="chart-point">
            <title>{`round ${p.round}: ${p.metric}`}</title>
          </circle>
        ))}
      </svg>
      <figcaption>
        <span className="legend legend--line">merged adapter</span>
        {base !== null && <span className="legend legend--base">base model</span>}
      </figcaption>
      <table className="sr-only">
        <caption>{label}</caption>
        <thead>
          <tr>
            <th scope="col">Round</th>
            <th scope="col">Merged adapter</th>
            <th scope="col">Base model</th>
          </tr>
        </thead>
        <tbody>
          {points.map((p) => (
            <tr key={p.round}>
              <td>{p.round}</td>
              <td>{p.metric}</td>
              <td>{p.base ?? '—'}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </figure>
  );
}
