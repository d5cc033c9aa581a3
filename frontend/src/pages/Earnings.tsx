// A worker operator's earnings and bond: connect the wallet that holds the worker's key, see
// what the escrow credits it per asset and its reputation, and withdraw; see its bond, bond more
// ether, ask part of it back and collect it once the escrow's unbonding delay has passed. Everything here is read from
// and sent to the chain the API follows; no sign-in is needed, since the escrow pays whoever
// holds the credited address.
import { useCallback, useEffect, useState } from 'react';
import { parseEther, type Address, type Hash } from 'viem';
import { Alert } from '../components/Alert';
import { shortAddress } from '../format';
import { usePortal } from '../state';
import { readEarnings, sendBond, sendWithdraw, type BondAction, type Earnings as EarningsData } from '../wallet/earnings';
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

  const [bondText, setBondText] = useState('');
  const [bondStage, setBondStage] = useState<{ step: 'idle' | 'signing' | 'sent' } | { step: 'done'; what: string } | { step: 'failed'; message: string }>({
    step: 'idle',
  });

  const changeBond = async (action: BondAction, what: string) => {
    if (!clients || !address || !escrow) return;
    setBondStage({ step: 'signing' });
    try {
      const hash = await sendBond(clients.public, clients.wallet, address, escrow, action);
      setBondStage({ step: 'sent' });
      const receipt = await waitForReceipt(clients.public, hash);
      if (receipt.status !== 'success') throw new Error('The escrow contract reverted the bond change.');
      setBondStage({ step: 'done', what });
      setBondText('');
      await Promise.all([load(), p.refreshBalance()]);
    } catch (err) {
      setBondStage({ step: 'failed', message: walletErrorMessage(err) });
    }
  };

  /** The amount typed, in wei; null when it is not a positive amount of ether. */
  const typedAmount = (): bigint | null => {
    try {
      const wei = parseEther(bondText.trim() as `${number}`);
      return wei > 0n ? wei : null;
    } catch {
      return null;
    }
  };

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
      {earnings && (
        <section className="card" aria-labelledby="bond-title" data-testid="bond">
          <h2 id="bond-title">Bond</h2>
          <p className="muted">
            A job that asks for a bond leases its tasks only while your active bond covers them; a forged proof of training
            slashes it to the job's requester. Unbonding stops the cover at once and pays back after the escrow's delay.
          </p>
          <table className="jobs">
            <caption className="sr-only">Your bond, per asset</caption>
            <thead>
              <tr>
                <th scope="col">Asset</th>
                <th scope="col">Active</th>
                <th scope="col">Unbonding</th>
              </tr>
            </thead>
            <tbody>
              {earnings.bonds.map((b) => ({ ...b, asset: assetOf(b.token, p.chain.tokens) })).map((b) => (
                <tr key={b.token} data-testid={`bond-${b.token === ETH ? 'ETH' : b.token.toLowerCase()}`}>
                  <td>{b.token === ETH ? 'ETH' : b.asset.symbol}</td>
                  <td data-testid="bond-active">{formatAmount(b.active, b.asset, 6)}</td>
                  <td data-testid="bond-unbonding">
                    {b.unbonding === 0n
                      ? '—'
                      : `${formatAmount(b.unbonding, b.asset, 6)} until ${new Date(b.unlockAt * 1000).toLocaleString()}`}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <form
            className="inline"
            onSubmit={(e) => {
              e.preventDefault();
            }}
          >
            <label>
              Ether
              <input
                name="bond-amount"
                inputMode="decimal"
                placeholder="0.01"
                value={bondText}
                onChange={(e) => setBondText(e.target.value)}
                aria-invalid={bondText !== '' && typedAmount() === null}
              />
            </label>
            {(() => {
              const amount = typedAmount();
              const eth = earnings.bonds.find((b) => b.token === ETH);
              const busyBond = bondStage.step === 'signing' || bondStage.step === 'sent';
              const unlocked = eth !== undefined && eth.unbonding > 0n && eth.unlockAt * 1000 <= Date.now();
              return (
                <>
                  <button
                    type="button"
                    className="primary"
                    disabled={busyBond || amount === null}
                    onClick={() => amount !== null && void changeBond({ kind: 'bond', amount }, 'Bonded')}
                  >
                    Bond ETH
                  </button>
                  <button
                    type="button"
                    disabled={busyBond || amount === null || !eth || amount > eth.active}
                    onClick={() => amount !== null && void changeBond({ kind: 'unbond', amount }, 'Unbonding asked')}
                  >
                    Unbond
                  </button>
                  <button
                    type="button"
                    disabled={busyBond || !unlocked}
                    onClick={() => void changeBond({ kind: 'complete' }, 'Unbonded; withdraw it above')}
                  >
                    Collect unbonded
                  </button>
                </>
              );
            })()}
          </form>
          {bondStage.step === 'signing' && <Alert kind="info">Confirm the bond change in your wallet…</Alert>}
          {bondStage.step === 'sent' && <Alert kind="info">Bond change sent; waiting for it to be mined…</Alert>}
          {bondStage.step === 'done' && <Alert kind="success">{bondStage.what}.</Alert>}
          {bondStage.step === 'failed' && <Alert kind="error">{bondStage.message}</Alert>}
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
