// Wallet and session at a glance: connect, the account, its network and balance, sign in/out.
import { usePortal } from '../state';
import { chainName } from '../wallet/wallet';
import { eth, shortAddress } from '../format';

export function WalletPanel() {
  const p = usePortal();
  const { wallet, session } = p;
  if (!wallet.provider) {
    return (
      <section className="wallet" aria-label="Wallet">
        <p>
          No Ethereum wallet found in this browser. Install a wallet extension (such as MetaMask) and reload to sign
          in.
        </p>
      </section>
    );
  }
  const signedInHere = session && wallet.address && session.address.toLowerCase() === wallet.address.toLowerCase();
  return (
    <section className="wallet" aria-label="Wallet">
      {wallet.address ? (
        <dl className="wallet-facts">
          <div>
            <dt>Account</dt>
            <dd title={wallet.address} data-testid="wallet-address">
              {shortAddress(wallet.address)}
            </dd>
          </div>
          <div>
            <dt>Network</dt>
            <dd data-testid="wallet-network">
              {wallet.chainId === null ? '…' : `${chainName(wallet.chainId)} (${wallet.chainId})`}
            </dd>
          </div>
          <div>
            <dt>Balance</dt>
            <dd data-testid="wallet-balance">{wallet.balanceWei === null ? '…' : eth(wallet.balanceWei)}</dd>
          </div>
        </dl>
      ) : (
        <button type="button" onClick={() => void p.connect()} disabled={Boolean(p.busy)}>
          Connect wallet
        </button>
      )}
      {wallet.address && !signedInHere && (
        <button type="button" className="primary" onClick={() => void p.signIn()} disabled={Boolean(p.busy) || Boolean(p.chainProblem)}>
          Sign in with Ethereum
        </button>
      )}
      {signedInHere && (
        <button type="button" onClick={p.signOut}>
          Sign out
        </button>
      )}
    </section>
  );
}
