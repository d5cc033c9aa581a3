import { Link } from '../router';
import { usePortal } from '../state';
import { chainName } from '../wallet/wallet';

export function Home() {
  const p = usePortal();
  return (
    <>
      <p className="lead">
        Post a LoRA or federated fine-tuning job, escrow its stake, and follow workers as they train on shards of your data.
        A validator scores every adapter on held-out data the workers never see; contributors are paid by quality.
      </p>
      <ol className="steps">
        <li>
          <strong>Sign in</strong> with your Ethereum wallet
          {p.chain.chainId !== null && ` on ${chainName(p.chain.chainId)} (chain ${p.chain.chainId})`}.
        </li>
        <li>
          <strong>Describe the job</strong>: base model, LoRA settings, shards and rounds, deadline and stake. Upload the
          dataset as JSONL and get a quote.
        </li>
        <li>
          <strong>Fund the escrow</strong> from your wallet. The job opens when the deposit is seen on chain.
        </li>
        <li>
          <strong>Follow it live</strong>: rounds, verdicts, the held-out metric, payouts, and the final adapter to download.
        </li>
      </ol>
      {p.session ? (
        <p>
          <Link className="button primary" href="/jobs/new">
            Post a job
          </Link>{' '}
          <Link className="button" href="/jobs">
            My jobs
          </Link>
        </p>
      ) : (
        <p className="muted">Connect and sign in with the wallet panel above to begin.</p>
      )}
    </>
  );
}
