// One job: its status and progress live over SSE, funding from the wallet while it awaits it,
// each task's training loss beside the held-out metric per round, submissions with verdicts,
// payouts and the final adapter.
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import type { Address, Hash, TransactionReceipt } from 'viem';
import { latestOnly, unwrap } from '../api/client';
import { isForbidden } from '../api/problem';
import { followStream } from '../api/sse';
import { fundingOf, isTerminal, type EventView, type JobResult, type JobView, type TrainingProgress } from '../api/types';
import { Alert } from '../components/Alert';
import { SignInFirst } from '../components/Layout';
import { MetricChart } from '../components/MetricChart';
import { Training } from '../components/Training';
import { capitalise, fixed, shortAddress, statusLabel, when } from '../format';
import { heldOutLabel, trainingByRound } from '../jobs/curves';
import { applyEvents, EMPTY_PROGRESS, metricName, metricSeries, pendingProofs, roundDone, type JobProgress, type Verdict } from '../jobs/progress';
import { errorMessage, usePortal } from '../state';
import { escrowJobId, ETH, waitForReceipt, type Funding } from '../wallet/escrow';
import { assetOf, formatAmount, fundingRevertMessage, sendFunding, stakeAssetOf, tokenStanding, type TokenStanding } from '../wallet/stake';
import { chainName, txUrl, walletErrorMessage, wrongChain } from '../wallet/wallet';

/** How often the training curves are read again while the job is open: a worker heartbeats every 5 s. */
const TRAINING_REFRESH_MS = 5000;

/** Events after which the job row itself (status, round, result) has changed. */
const REFETCH_ON = new Set<EventView['kind']>(['funded', 'round_opened', 'aggregated', 'completed', 'cancelled', 'refunded']);

export function JobPage({ id }: { id: string }) {
  const p = usePortal();
  const [job, setJob] = useState<JobView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [progress, setProgress] = useState<JobProgress>(EMPTY_PROGRESS);
  const [events, setEvents] = useState<EventView[]>([]);
  const [live, setLive] = useState<'connecting' | 'live' | 'retrying' | 'ended' | 'restricted'>('connecting');
  const signedIn = Boolean(p.session);

  // The job is read again on feed events and by the fund panel's poll, reads that can race:
  // only the latest one's answer counts, or a row read just before the funding, answered last,
  // would show a funded job as awaiting funding again (and the poll, seeing the feed's
  // `funded` event, would not read it again).
  const readJob = useMemo(() => latestOnly(() => unwrap(p.api.GET('/v1/jobs/{id}', { params: { path: { id } } }))), [p.api, id]);
  const refetch = useCallback(async () => {
    try {
      const answer = await readJob();
      if (!answer) return;
      setJob(answer.value);
      setError(null);
    } catch (err) {
      setError(errorMessage(err));
    }
  }, [readJob]);

  useEffect(() => {
    if (signedIn) void refetch();
  }, [refetch, signedIn]);

  useEffect(() => {
    if (!signedIn) return;
    const controller = new AbortController();
    setProgress(EMPTY_PROGRESS);
    setEvents([]);
    setLive('connecting');
    followStream({
      url: `/v1/jobs/${id}/events/stream`,
      token: () => p.keeper.accessToken(),
      signal: controller.signal,
      onOpen: () => setLive('live'),
      onError: () => setLive('retrying'),
      onMessage: (m) => {
        // Read as the API documents it; a kind from a newer server still arrives, and
        // applyEvents keeps it as it is.
        let event: EventView;
        try {
          event = JSON.parse(m.data) as EventView;
        } catch {
          return;
        }
        setEvents((old) => (old.some((e) => e.id === event.id) ? old : [...old, event]));
        setProgress((old) => applyEvents(old, [event]));
        if (REFETCH_ON.has(event.kind)) void refetch();
      },
    })
      .then(() => {
        if (!controller.signal.aborted) {
          setLive('ended');
          void refetch();
        }
      })
      .catch((err: unknown) => {
        if (controller.signal.aborted) return;
        if (isForbidden(err)) {
          // Not a party to the job: the board shows it, its feed is not ours to read.
          setLive('restricted');
          return;
        }
        setLive('ended');
        setError(errorMessage(err));
      });
    return () => controller.abort();
  }, [id, signedIn, p.keeper, refetch]);

  // Once funded: read again on every merge (the held-out metric), on every status change, and
  // every few seconds while the job is open.
  // Set once this page starts funding the job: the fund panel then stays until it has shown its
  // outcome, even when the marketplace opens the job before the wallet's receipt arrives.
  const [fundingHere, setFundingHere] = useState(false);
  const merges = metricSeries(progress).length;
  const funded = Boolean(job) && job?.status !== 'awaiting_funding';
  const training = useTraining(id, signedIn && funded && live !== 'restricted', job?.status === 'open', `${job?.status}/${merges}`);

  if (!p.session) return <SignInFirst what="follow this job" />;
  if (!job) return error ? <Alert kind="error">{error}</Alert> : <p role="status">Loading the job…</p>;

  const mine = job.requester.toLowerCase() === p.session.address.toLowerCase();
  // What the stake, the payouts and a refund are counted in.
  const asset = stakeAssetOf(job.spec, p.chain.tokens);
  const series = metricSeries(progress);
  const name = metricName(progress);
  const metricTitle = name ? heldOutLabel(name) : 'held-out metric';
  const current = progress.rounds.find((r) => r.round === job.current_round) ?? progress.rounds.at(-1);

  return (
    <div className="job">
      {error && <Alert kind="error">{error}</Alert>}
      <section className="card" aria-labelledby="status-title">
        <h2 id="status-title">Status</h2>
        <p className="status-line">
          <span className={`badge badge--${job.status}`} data-testid="job-status">
            {statusLabel(job.status)}
          </span>{' '}
          <span className="muted" aria-live="polite">
            {live === 'live'
              ? 'live'
              : live === 'retrying'
                ? 'reconnecting…'
                : live === 'connecting'
                  ? 'connecting…'
                  : live === 'restricted'
                    ? 'public view'
                    : 'final'}
          </span>
        </p>
        {live === 'restricted' && (
          <p className="muted" data-testid="restricted-note">
            Its progress, events and result are shown to its requester, its workers (their own tasks), validators and
            admins; this address is none of them.
          </p>
        )}
        <dl className="facts">
          <div>
            <dt>Job</dt>
            <dd>
              <code>{job.id}</code>
            </dd>
          </div>
          <div>
            <dt>Kind</dt>
            <dd>{job.kind}</dd>
          </div>
          <div>
            <dt>Round</dt>
            <dd data-testid="job-round">
              {job.current_round} of {job.rounds}
            </dd>
          </div>
          <div>
            <dt>Shards</dt>
            <dd data-testid="shard-progress">
              {current && current.tasks !== null
                ? `${roundDone(current).done}/${current.tasks} contributors done`
                : `${job.shards} shard${job.shards === 1 ? '' : 's'}`}
            </dd>
          </div>
          <div>
            <dt>Stake</dt>
            <dd>
              {formatAmount(job.stake_wei, asset)}
              {job.dev_funded && ' (funded by the development key)'}
            </dd>
          </div>
          <div>
            <dt>Deadline</dt>
            <dd>{when(job.deadline)}</dd>
          </div>
          {job.spec_cid && (
            <div>
              <dt>Spec</dt>
              <dd>
                <code>{job.spec_cid}</code>
              </dd>
            </div>
          )}
        </dl>
        {job.status === 'awaiting_funding' && mine && <Cancel id={job.id} onDone={refetch} />}
      </section>

      {(job.status === 'awaiting_funding' || fundingHere) && mine && (
        <FundPanel job={job} funded={progress.funded} onStarted={() => setFundingHere(true)} onFunded={refetch} />
      )}
      {progress.funded && (
        <Alert kind="success">
          Funded on chain{progress.funded.escrow_job_id ? ` as escrow job ${progress.funded.escrow_job_id}` : ''}
          {progress.funded.tx_hash && (
            <>
              {' '}
              in <TxLink chainId={p.chain.chainId} hash={progress.funded.tx_hash} />
            </>
          )}
          .
        </Alert>
      )}

      {job.status !== 'awaiting_funding' && (
        <section className="card" aria-labelledby="training-title" data-testid="training">
          <h2 id="training-title">Training loss per task</h2>
          {training.error && <Alert kind="error">{training.error}</Alert>}
          {training.data ? <Training rounds={training.data} /> : !training.error && <p role="status">Loading the training curves…</p>}
        </section>
      )}

      <section className="card" aria-labelledby="metric-title">
        <h2 id="metric-title">{capitalise(metricTitle)} per round</h2>
        <MetricChart points={series} label={`${capitalise(metricTitle)} of the merged adapter per round, against the base model`} />
      </section>

      <section className="card" aria-labelledby="subs-title">
        <h2 id="subs-title">Rounds and submissions</h2>
        {progress.rounds.length === 0 ? (
          <p className="muted">No round has opened yet.</p>
        ) : (
          progress.rounds.map((r) => (
            <div key={r.round} className="round">
              <h3>
                Round {r.round}
                {r.tasks !== null && ` · ${roundDone(r).done}/${r.tasks} contributors done`}
                {r.aggregated && ` · merged, metric ${fixed(r.aggregated.metric, 4)}`}
              </h3>
              {r.claims.length > 0 && (
                <p className="muted">
                  Claimed: {r.claims.map((c) => `shard ${c.shard} by ${shortAddress(c.worker)}`).join('; ')}
                </p>
              )}
              {r.submissions.length > 0 && (
                <div className="table-wrap">
                  <table>
                    <thead>
                      <tr>
                        <th scope="col">Shard</th>
                        <th scope="col">Worker</th>
                        <th scope="col">Samples</th>
                        <th scope="col">Verdict</th>
                        <th scope="col">Quality</th>
                        <th scope="col">Metric (base)</th>
                        <th scope="col">Proof of training</th>
                      </tr>
                    </thead>
                    <tbody>
                      {r.submissions.map((s) => (
                        <tr key={s.submission_id}>
                          <td>{s.shard}</td>
                          <td title={s.worker}>{shortAddress(s.worker)}</td>
                          <td>{s.samples}</td>
                          <td>
                            {s.verdict === null ? (
                              <span className="muted">being scored</span>
                            ) : s.verdict.accepted ? (
                              <span className="verdict verdict--ok">accepted</span>
                            ) : (
                              <span className="verdict verdict--no">rejected{s.verdict.reason ? `: ${s.verdict.reason}` : ''}</span>
                            )}
                          </td>
                          <td>{fixed(s.verdict?.quality, 3)}</td>
                          <td>
                            {fixed(s.verdict?.metric, 4)}
                            {s.verdict?.base_metric !== null && s.verdict?.base_metric !== undefined && ` (${fixed(s.verdict.base_metric, 4)})`}
                            {s.verdict?.examples != null && <span className="muted"> on {s.verdict.examples} held-out</span>}
                          </td>
                          <td>
                            <ProofCell verdict={s.verdict} />
                          </td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              )}
            </div>
          ))
        )}
      </section>

      {!progress.completed && !progress.refunded && progress.awaitingProofs !== null && (
        <Alert kind="info">
          Every round is merged. The payout waits for {progress.awaitingProofs} proof
          {progress.awaitingProofs === 1 ? '' : 's'} of training still to be replayed.
        </Alert>
      )}
      {!progress.completed && !progress.refunded && progress.awaitingProofs === null && pendingProofs(progress) > 0 && (
        <p className="muted" role="status">
          {pendingProofs(progress)} proof{pendingProofs(progress) === 1 ? '' : 's'} of training being replayed while the job
          trains; the payout waits for them.
        </p>
      )}

      {progress.completed && (
        <section className="card" aria-labelledby="payout-title">
          <h2 id="payout-title">Payouts</h2>
          {progress.completed.tx_hash && (
            <p>
              Settled in <TxLink chainId={p.chain.chainId} hash={progress.completed.tx_hash} />.
            </p>
          )}
          <div className="table-wrap">
            <table>
              <thead>
                <tr>
                  <th scope="col">Contributor</th>
                  <th scope="col">Amount</th>
                  <th scope="col">Reputation after</th>
                </tr>
              </thead>
              <tbody>
                {progress.completed.payouts.map((x) => (
                  <tr key={x.address}>
                    <td title={x.address}>
                      <code>{x.address}</code>
                    </td>
                    <td>{formatAmount(x.amount_wei, asset, 6)}</td>
                    <td>{x.reputation}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      )}
      {progress.refunded && (
        <Alert kind="info">
          <span data-testid="refund-reason">
            {progress.refunded.reason ?? 'The deadline passed'}
          </span>
          : the stake ({formatAmount(progress.refunded.stake_wei, asset, 6)}) was refunded to the
          requester
          {progress.refunded.tx_hash && (
            <>
              {' '}
              in <TxLink chainId={p.chain.chainId} hash={progress.refunded.tx_hash} />
            </>
          )}
          .
        </Alert>
      )}

      {/* A job that ended early paying its completed rounds (refunded with a result) has one too. */}
      {(job.status === 'completed' || (job.status === 'refunded' && job.result_adapter_cid)) && (
        <ResultPanel id={job.id} />
      )}

      <section className="card" aria-labelledby="log-title">
        <h2 id="log-title">Event log</h2>
        <ol className="events" data-testid="event-log">
          {events.map((e) => (
            <li key={e.id}>
              <span className="event-kind">{e.kind}</span> <time dateTime={e.created_at}>{when(e.created_at)}</time>
              <details>
                <summary>Details</summary>
                <pre>{JSON.stringify(e.payload, null, 2)}</pre>
              </details>
            </li>
          ))}
        </ol>
        {isTerminal(job.status) && live === 'ended' && <p className="muted">This job is {statusLabel(job.status).toLowerCase()}; no more events will come.</p>}
      </section>
    </div>
  );
}

/**
 * The job's training curves by round, read once `enabled`, whenever `reload` changes, and
 * every TRAINING_REFRESH_MS while `running`.
 */
function useTraining(id: string, enabled: boolean, running: boolean, reload: string) {
  const p = usePortal();
  const [data, setData] = useState<TrainingProgress | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (!enabled) return;
    let live = true;
    // One read at a time: a slow answer is not overtaken by the next tick's.
    let inFlight = false;
    const load = async () => {
      if (inFlight) return;
      inFlight = true;
      try {
        const next = await unwrap(p.api.GET('/v1/jobs/{id}/progress', { params: { path: { id } } }));
        if (live) {
          setData(next);
          setError(null);
        }
      } catch (err) {
        // The curves are the requester's, validators' and admins': a worker of the job (or
        // anyone else) sees the page without them rather than an error.
        if (live) setError(isForbidden(err) ? null : errorMessage(err));
      } finally {
        inFlight = false;
      }
    };
    void load();
    const timer = running ? window.setInterval(() => void load(), TRAINING_REFRESH_MS) : null;
    return () => {
      live = false;
      if (timer !== null) window.clearInterval(timer);
    };
  }, [p.api, id, enabled, running, reload]);
  const rounds = useMemo(() => (data ? trainingByRound(data) : null), [data]);
  return { data: rounds, error };
}

/** A submission's proof of training: replayed after its verdict, by which validator, and how it ended. */
function ProofCell({ verdict }: { verdict: Verdict | null }) {
  if (verdict === null || verdict.proof === 'not_due') return <span className="muted">—</span>;
  if (verdict.proof === 'pending') return <span className="muted">to be replayed</span>;
  const by = verdict.proof_by ? ` by ${shortAddress(verdict.proof_by)}` : '';
  return verdict.proof === 'passed' ? (
    <span className="verdict verdict--ok" title={verdict.proof_by ?? undefined}>
      replayed{by}
    </span>
  ) : (
    <span className="verdict verdict--no" title={verdict.proof_reason ?? undefined}>
      failed{by}: the worker forfeits the job
    </span>
  );
}

function TxLink({ chainId, hash }: { chainId: number | null; hash: string }) {
  const url = txUrl(chainId, hash);
  const text = <code title={hash}>{shortAddress(hash)}</code>;
  return url ? (
    <a href={url} target="_blank" rel="noreferrer">
      transaction {text}
    </a>
  ) : (
    <span>transaction {text}</span>
  );
}

function Cancel({ id, onDone }: { id: string; onDone: () => Promise<void> }) {
  const p = usePortal();
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  return (
    <div className="actions">
      <button
        type="button"
        disabled={busy}
        onClick={async () => {
          if (!window.confirm('Withdraw this job? It has not been funded, so nothing is spent.')) return;
          setBusy(true);
          try {
            await unwrap(p.api.POST('/v1/jobs/{id}/cancel', { params: { path: { id } } }));
            await onDone();
          } catch (err) {
            setError(errorMessage(err));
          } finally {
            setBusy(false);
          }
        }}
      >
        Withdraw job
      </button>
      {error && <Alert kind="error">{error}</Alert>}
    </div>
  );
}

type FundStage =
  | { step: 'idle' }
  | { step: 'signing' }
  | { step: 'approving'; hash?: Hash }
  | { step: 'sent'; hash: Hash }
  | { step: 'confirmed'; hash: Hash; receipt: TransactionReceipt; escrowId: bigint | null }
  | { step: 'failed'; message: string; hash?: Hash };

export function FundPanel({
  job,
  funded,
  onStarted,
  onFunded,
}: {
  job: JobView;
  funded: JobProgress['funded'];
  onStarted: () => void;
  onFunded: () => Promise<void>;
}) {
  const p = usePortal();
  const funding = fundingOf(job, p.chain);
  const [stage, setStage] = useState<FundStage>({ step: 'idle' });
  const [devFunded, setDevFunded] = useState<string | null>(null);
  const poll = useRef<number | null>(null);
  // For a token stake: the wallet's balance of the token and what the escrow may take of it.
  const [standing, setStanding] = useState<TokenStanding | null>(null);
  const stakeToken = funding && funding.token.toLowerCase() !== ETH ? (funding.token as Address) : null;
  const escrowAddress = funding?.escrow_address as Address | undefined;
  const { clients, address } = p.wallet;
  const readStanding = useCallback(async () => {
    if (!stakeToken || !clients || !address || !escrowAddress) return setStanding(null);
    try {
      setStanding(await tokenStanding(clients.public, stakeToken, address, escrowAddress));
    } catch {
      // A token that cannot be read: funding's own simulation names the problem.
      setStanding(null);
    }
  }, [stakeToken, clients, address, escrowAddress]);
  useEffect(() => {
    void readStanding();
  }, [readStanding]);

  // After confirmation the API needs a moment to see the chain event; look again every 2 s
  // in case the event stream is slower than the job row.
  useEffect(() => {
    if ((stage.step !== 'confirmed' && !devFunded) || funded) return;
    poll.current = window.setInterval(() => void onFunded(), 2000);
    return () => {
      if (poll.current !== null) window.clearInterval(poll.current);
    };
  }, [stage.step, devFunded, funded, onFunded]);

  const confirmed =
    stage.step === 'confirmed' ? (
      <Alert kind="success">
        <span data-testid="fund-confirmed">
          Confirmed in block {stage.receipt.blockNumber.toString()}
          {stage.escrowId !== null && ` as escrow job ${stage.escrowId.toString()}`}
        </span>
        . {funded ? 'The job is open.' : 'Waiting for the marketplace to open the job…'}
      </Alert>
    ) : null;
  if (!funding) {
    // Funded already (here, with its confirmation still to show, or elsewhere): a job that
    // left `awaiting_funding` has no funding terms any more, and that is no problem.
    if (job.status !== 'awaiting_funding') return confirmed;
    return (
      <Alert kind="warning">
        This job awaits funding, but the server has not said how: it gave no funding terms or names no escrow contract
        (<code>GET /v1/chain</code>).
      </Alert>
    );
  }
  const chainIssue = p.wallet.chainId !== null ? wrongChain(p.wallet.chainId, funding.chain_id) : null;
  const stake = BigInt(funding.stake_wei);
  const asset = assetOf(funding.token, p.chain.tokens);
  const balance = asset.isEth ? p.wallet.balanceWei : (standing?.balance ?? null);
  const short = balance !== null && balance < stake;
  const needsApproval = !asset.isEth && standing !== null && standing.allowance < stake;

  const devFund = async () => {
    setStage({ step: 'signing' });
    try {
      const r = await unwrap(p.api.POST('/v1/jobs/{id}/dev-fund', { params: { path: { id: job.id } } }));
      setDevFunded(r.tx_hash);
      setStage({ step: 'idle' });
      await onFunded();
    } catch (err) {
      setStage({ step: 'failed', message: errorMessage(err) });
    }
  };

  const fund = async (f: Funding) => {
    if (!clients || !address) {
      setStage({ step: 'failed', message: 'Connect your wallet first.' });
      return;
    }
    onStarted();
    setStage({ step: 'signing' });
    let hash: Hash | undefined;
    try {
      hash = await sendFunding(clients.public, clients.wallet, address, f, asset, (s) =>
        setStage(s.step === 'approving' ? s : { step: 'signing' }),
      );
      setStage({ step: 'sent', hash });
      const receipt = await waitForReceipt(clients.public, hash);
      if (receipt.status !== 'success') throw new Error('The transaction was reverted by the escrow contract.');
      setStage({ step: 'confirmed', hash, receipt, escrowId: escrowJobId(receipt, f.escrow_address) });
      await p.refreshBalance();
      await onFunded();
    } catch (err) {
      setStage({ step: 'failed', message: fundingRevertMessage(err, asset) ?? walletErrorMessage(err), ...(hash ? { hash } : {}) });
      void readStanding();
    }
  };

  return (
    <section className="card" aria-labelledby="fund-title" data-testid="fund-panel">
      <h2 id="fund-title">Fund the escrow</h2>
      <p>
        Escrow {formatAmount(stake, asset, 6)} on {chainName(funding.chain_id)} in the contract <code>{funding.escrow_address}</code>.
        {!asset.isEth && (
          <>
            {' '}
            The stake is in the token <code>{funding.token}</code>: your wallet first approves the escrow to take it, then funds.
          </>
        )}{' '}
        Workers start once the marketplace sees the deposit.
      </p>
      {chainIssue && <Alert kind="warning">{chainIssue}</Alert>}
      {short && !chainIssue && (
        <Alert kind="warning">
          <span data-testid="fund-short">
            Your balance ({formatAmount(balance!, asset)}) is below the stake.
          </span>
        </Alert>
      )}
      {stage.step === 'approving' && (
        <Alert kind="info">
          {stage.hash ? (
            <>
              Approval sent <TxLink chainId={funding.chain_id} hash={stage.hash} />; waiting for it to be mined…
            </>
          ) : (
            `Approve the escrow to take ${formatAmount(stake, asset, 6)} in your wallet…`
          )}
        </Alert>
      )}
      {stage.step === 'signing' && <Alert kind="info">Confirm the transaction in your wallet…</Alert>}
      {stage.step === 'sent' && (
        <Alert kind="info">
          Sent <TxLink chainId={funding.chain_id} hash={stage.hash} />; waiting for it to be mined…
        </Alert>
      )}
      {confirmed}
      {stage.step === 'failed' && (
        <Alert kind="error">
          {stage.message}
          {stage.hash && (
            <>
              {' '}
              (<TxLink chainId={funding.chain_id} hash={stage.hash} />)
            </>
          )}
        </Alert>
      )}
      <div className="actions">
        <button
          type="button"
          className="primary"
          disabled={
            Boolean(chainIssue) ||
            !p.wallet.address ||
            stage.step === 'signing' ||
            stage.step === 'approving' ||
            stage.step === 'sent' ||
            stage.step === 'confirmed'
          }
          onClick={() => void fund(funding)}
        >
          {needsApproval ? 'Approve and fund' : 'Fund'} {formatAmount(stake, asset, 6)}
        </button>
        {p.chain.devFunding && (
          <button
            type="button"
            disabled={stage.step === 'signing' || stage.step === 'approving' || stage.step === 'sent' || Boolean(devFunded)}
            onClick={() => void devFund()}
          >
            Fund from the development account
          </button>
        )}
      </div>
      {devFunded && (
        <Alert kind="info">
          The server funded the escrow from its development account in <TxLink chainId={funding.chain_id} hash={devFunded} />;
          waiting for the job to open…
        </Alert>
      )}
    </section>
  );
}

function ResultPanel({ id }: { id: string }) {
  const p = usePortal();
  const [result, setResult] = useState<JobResult | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [forbidden, setForbidden] = useState(false);
  useEffect(() => {
    unwrap(p.api.GET('/v1/jobs/{id}/result', { params: { path: { id } } }))
      .then(setResult)
      .catch((err: unknown) => (isForbidden(err) ? setForbidden(true) : setError(errorMessage(err))));
  }, [p.api, id]);

  // Same-origin API files need the bearer token, which a plain link cannot carry.
  const download = async (name: string, url: string) => {
    try {
      const token = await p.keeper.accessToken();
      const response = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
      if (!response.ok) throw new Error(`${name}: the server answered ${response.status}`);
      const href = URL.createObjectURL(await response.blob());
      const a = document.createElement('a');
      a.href = href;
      a.download = name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(href), 10_000);
    } catch (err) {
      setError(errorMessage(err));
    }
  };

  return (
    <section className="card" aria-labelledby="result-title" data-testid="result">
      <h2 id="result-title">Final adapter</h2>
      {error && <Alert kind="error">{error}</Alert>}
      {forbidden && (
        <p className="muted" data-testid="result-restricted">
          The adapter is the requester's: it is sealed, and opened only for the requester, validators and admins.
        </p>
      )}
      {result && (
        <>
          <p>
            Adapter <code>{result.adapter_cid}</code> in Hugging Face PEFT format.
          </p>
          {result.aggregate && (
            <p data-testid="result-metric">
              Held-out {result.aggregate.metric_name} {result.aggregate.metric.toFixed(4)}: the best of the job's rounds, which is the one handed over.
            </p>
          )}
          <p className="muted" data-testid="result-continue">
            To train it further on new data, post a job with this CID as its “Continue from adapter” (or{' '}
            <code>shardwork job continue {id} --data …</code>).
          </p>
          <ul className="files">
            {result.files.map((f) =>
              new URL(f.url, location.href).origin === location.origin ? (
                <li key={f.name}>
                  <button type="button" className="link" onClick={() => void download(f.name, f.url)}>
                    Download {f.name}
                  </button>
                </li>
              ) : (
                <li key={f.name}>
                  <a href={f.url} download={f.name}>
                    Download {f.name}
                  </a>
                </li>
              ),
            )}
          </ul>
        </>
      )}
    </section>
  );
}
