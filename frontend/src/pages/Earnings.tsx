// A worker operator's earnings: connect the wallet that holds the worker's key, see what the
// escrow credits it per asset and its reputation, and withdraw. Everything here is read from
// and sent to the chain the API follows; no sign-in is needed, since the escrow pays whoever
// holds the credited address.
import { useCallback, useEffect, useState } from 'react';
import type { Address, Hash } from 'viem';
import { Alert } from '../components/Alert';
import { shortAddress } from '../format';
import { usePortal } from '../state';
import { readEarnings, sendWithdraw, type Earnings as EarningsData } from '../wallet/earnings';
import { ETH, waitForReceipt } from '../wallet/escrow';
import { assetOf, formatAmount } from '../wallet/stake';
import { txUrl, walletErrorMessage } from '../wallet/wallet';

type Stage =
  | { step: 'idle' }
  | { step: 'signing'; token: Address }
  | { step: 'sent'; token: Address; hash: Hash }
  | { step: 'done'; token: Address; hash: Hash; withdrawn: bigint }
  | { step: 'failed'; message: string };

export function Earnings() {
  const p = usePortal();
  const { clients, address } = p.wallet;
  const escrow = p.chain.escrowAddress as Address | null;
  const [earnings, setEarnings] = useState<EarningsData | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [stage, setStage] = useState<Stage>({ step: 'idle' });

  const load = useCallback(async () => {
    if (!clients || !address || !escrow || p.chainProblem) return;
    setError(null);
    try {
      setEarnings(await readEarnings(clients.public, escrow, address));
    } catch (err) {
      setError(walletErrorMessage(err));
    }
  }, [clients, address, escrow, p.chainProblem]);

  useEffect(() => {
    setEarnings(null);
    void load();
  }, [load]);

  const withdraw = async (token: Address, credited: bigint) => {
    if (!clients || !address || !escrow) return;
    setStage({ step: 'signing', token });
    try {
      const hash = await sendWithdraw(clients.public, clients.wallet, address, escrow, token);
      setStage({ step: 'sent', token, hash });
      const receipt = await waitForReceipt(clients.public, hash);
      if (receipt.status !== 'success') throw new Error('The escrow contract reverted the withdrawal.');
      setStage({ step: 'done', token, hash, withdrawn: credited });
      await Promise.all([load(), p.refreshBalance()]);
    } catch (err) {
      setStage({ step: 'failed', message: walletErrorMessage(err) });
    }
  };

  if (!p.wallet.provider) return <p>Install an Ethereum wallet to see a worker's earnings.</p>;
  if (!address) {
    return (
      <div className="card">
        <p>Connect the wallet that holds your worker's key to see what the escrow owes it.</p>
        <button type="button" onClick={() => void p.connect()} disabled={Boolean(p.busy)}>
          Connect wallet
        </button>
      </div>
    );
  }
  if (!escrow) return <p>This marketplace names no escrow contract (GET /v1/chain answered nothing), so there is nothing to read.</p>;
  if (p.chainProblem) return <p>Switch your wallet to the marketplace's network to see your earnings.</p>;

  const busy = stage.step === 'signing' || stage.step === 'sent';
  const link = stage.step === 'sent' || stage.step === 'done' ? txUrl(p.wallet.chainId, stage.hash) : null;
  return (
    <>
      <p className="lead">
        The escrow pays by pull: each payout credits the contributors in the contract, and the credit waits there until you
        withdraw it to <code title={address}>{shortAddress(address)}</code>.
      </p>
      {error && <Alert kind="error">{error}</Alert>}
      {!earnings && !error && <p>Reading the escrow…</p>}
      {earnings && (
        <section className="card" aria-labelledby="credit-title" data-testid="earnings">
          <h2 id="credit-title">Credit</h2>
          <dl className="facts">
            <div>
              <dt>Reputation</dt>
              <dd data-testid="reputation">{(earnings.reputationBps / 100).toFixed(2)}%</dd>
            </div>
          </dl>
          <table className="jobs">
            <caption className="sr-only">What you can withdraw, per asset</caption>
            <thead>
              <tr>
                <th scope="col">Asset</th>
                <th scope="col">Can withdraw</th>
                <th scope="col">
                  <span className="sr-only">Action</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {earnings.credit.map((c) => ({ ...c, asset: assetOf(c.token, p.chain.tokens) })).map((c) => (
                <tr key={c.token} data-testid={`credit-${c.token === ETH ? 'ETH' : c.token.toLowerCase()}`}>
                  <td>
                    {c.token === ETH ? (
                      'ETH'
                    ) : (
                      <>
                        {c.asset.symbol} <code title={c.token}>{shortAddress(c.token)}</code>
                      </>
                    )}
                  </td>
                  <td data-testid="credit-amount">{formatAmount(c.amount, c.asset, 6)}</td>
                  <td>
                    <button
                      type="button"
                      className="primary"
                      disabled={busy || c.amount === 0n}
                      onClick={() => void withdraw(c.token, c.amount)}
                    >
                      Withdraw {c.asset.named ? c.asset.symbol : 'tokens'}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {earnings.credit.every((c) => c.amount === 0n) && <p className="muted">Nothing to withdraw right now.</p>}
        </section>
      )}
      {stage.step === 'signing' && <Alert kind="info">Confirm the withdrawal in your wallet…</Alert>}
      {stage.step === 'sent' && <Alert kind="info">Withdrawal sent; waiting for it to be mined…</Alert>}
      {stage.step === 'done' && (
        <Alert kind="success">
          Withdrew {formatAmount(stage.withdrawn, assetOf(stage.token, p.chain.tokens), 6)} to your account.
          {link && (
            <>
              {' '}
              <a href={link} target="_blank" rel="noreferrer">
                See the transaction
              </a>
            </>
          )}
        </Alert>
      )}
      {stage.step === 'failed' && <Alert kind="error">{stage.message}</Alert>}
    </>
  );
}
