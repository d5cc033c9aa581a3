// The signed-in requester's jobs, newest first, filtered by status, a page at a time.
import { useEffect, useState } from 'react';
import { unwrap } from '../api/client';
import { JOB_STATUSES, type JobStatus, type JobView } from '../api/types';
import { Alert } from '../components/Alert';
import { SignInFirst } from '../components/Layout';
import { shortJobId, statusLabel, when } from '../format';
import { Link, navigate } from '../router';
import { errorMessage, usePortal } from '../state';
import { formatAmount, stakeAssetOf } from '../wallet/stake';

const PAGE = 20;

export function MyJobs({ path }: { path: string }) {
  const p = usePortal();
  const requested = new URLSearchParams(path.split('?')[1] ?? '').get('status') ?? '';
  const status: JobStatus | '' = (JOB_STATUSES as readonly string[]).includes(requested) ? (requested as JobStatus) : '';
  const [jobs, setJobs] = useState<JobView[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const address = p.session?.address;

  const load = async (after: string | null) => {
    if (!address) return;
    setLoading(true);
    setError(null);
    try {
      const page = await unwrap(
        p.api.GET('/v1/jobs', {
          params: { query: { requester: address, limit: PAGE, ...(status ? { status } : {}), ...(after ? { cursor: after } : {}) } },
        }),
      );
      setJobs((old) => (after ? [...old, ...page.jobs] : page.jobs));
      setCursor(page.next_cursor ?? null);
    } catch (err) {
      setError(errorMessage(err));
    } finally {
      setLoading(false);
    }
  };

  useEffect(() => {
    void load(null);
    // Reload from the first page when the filter or the account changes; `load` is recreated each render.
  }, [status, address]);

  if (!p.session) return <SignInFirst what="see your jobs" />;

  return (
    <>
      <div className="toolbar">
        <label htmlFor="status-filter">Status</label>
        <select
          id="status-filter"
          value={status}
          onChange={(e) => navigate(e.target.value ? `/jobs?status=${e.target.value}` : '/jobs', true)}
        >
          <option value="">All</option>
          {JOB_STATUSES.map((s) => (
            <option key={s} value={s}>
              {statusLabel(s)}
            </option>
          ))}
        </select>
        <Link className="button primary" href="/jobs/new">
          Post a job
        </Link>
      </div>
      {error && <Alert kind="error">{error}</Alert>}
      {jobs.length === 0 && !loading && !error ? (
        <p>{status ? `No ${statusLabel(status).toLowerCase()} jobs.` : 'You have not posted a job yet.'}</p>
      ) : (
        <div className="table-wrap">
          <table className="jobs">
            <caption className="sr-only">Your jobs</caption>
            <thead>
              <tr>
                <th scope="col">Job</th>
                <th scope="col">Status</th>
                <th scope="col">Kind</th>
                <th scope="col">Progress</th>
                <th scope="col">Stake</th>
                <th scope="col">Posted</th>
              </tr>
            </thead>
            <tbody>
              {jobs.map((job) => (
                <tr key={job.id}>
                  <td>
                    <Link href={`/jobs/${job.id}`}>{shortJobId(job.id)}</Link>
                  </td>
                  <td>
                    <span className={`badge badge--${job.status}`}>{statusLabel(job.status)}</span>
                  </td>
                  <td>{job.kind}</td>
                  <td>
                    round {job.current_round}/{job.rounds}, {job.shards} shard{job.shards === 1 ? '' : 's'}
                  </td>
                  <td>{formatAmount(job.stake_wei, stakeAssetOf(job.spec, p.chain.tokens))}</td>
                  <td>{when(job.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {loading && <p role="status">Loading…</p>}
      {cursor && !loading && (
        <button type="button" onClick={() => void load(cursor)}>
          Load more
        </button>
      )}
    </>
  );
}
