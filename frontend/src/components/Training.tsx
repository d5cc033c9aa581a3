// A job's training, round by round: the loss curve of each task beside the held-out metric of
// the round's merge, named by the validator's metric and the way it improves.
import { capitalise, fixed } from '../format';
import { heldOutLabel, type HeldOut, type RoundTraining } from '../jobs/curves';
import { LossChart } from './LossChart';

export function Training({ rounds }: { rounds: RoundTraining[] }) {
  if (rounds.length === 0) {
    return <p className="muted">No round has opened yet; workers report their training loss once they start.</p>;
  }
  return (
    <>
      {rounds.map((r) => (
        <div key={r.round} className="training-round" data-testid={`training-round-${r.round}`}>
          <h3>
            Round {r.round}
            <span className="muted">
              {' '}
              · {new Set(r.series.map((s) => s.taskId)).size} of {r.tasks} task{r.tasks === 1 ? '' : 's'} reporting
            </span>
          </h3>
          <div className="training-grid">
            <LossChart series={r.series} totalSteps={r.totalSteps} label={`Training loss per task in round ${r.round}, by step`} />
            <HeldOutPanel heldOut={r.heldOut} />
          </div>
        </div>
      ))}
    </>
  );
}

function HeldOutPanel({ heldOut }: { heldOut: HeldOut | null }) {
  if (!heldOut) {
    return (
      <aside className="held-out" aria-label="Held-out metric">
        <p className="muted">Scored on the held-out set once the round's adapters are merged.</p>
      </aside>
    );
  }
  const label = heldOutLabel(heldOut.name);
  const verdict =
    heldOut.improved === null ? null : heldOut.improved ? (
      <span className="verdict verdict--ok">better than the base model</span>
    ) : (
      <span className="verdict verdict--no">not better than the base model</span>
    );
  return (
    <aside className="held-out" aria-label={label} data-testid="held-out">
      <p className="held-out-name">{capitalise(label)}</p>
      <dl className="facts">
        <div>
          <dt>Merged adapter</dt>
          <dd>{fixed(heldOut.metric, 4)}</dd>
        </div>
        <div>
          <dt>Base model</dt>
          <dd>{fixed(heldOut.base, 4)}</dd>
        </div>
      </dl>
      {verdict && <p>{verdict}</p>}
    </aside>
  );
}
