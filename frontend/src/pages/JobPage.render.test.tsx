import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import type { JobView } from '../api/types';
import { PortalContext, type Portal } from '../state';
import { FundPanel } from './JobPage';

const ESCROW = '0x5fbdb2315678afecb367f032d93f642f64180aa3';
const REQUESTER = '0x90f79bf6eb2c4f870365e785982e1f101e93b906';

/** The portal as the e2e's page has it: the API's chain known, a wallet connected on it. */
const portal = {
  chain: { chainId: 31337, escrowAddress: ESCROW, devFunding: false, tokens: [] },
  wallet: { provider: null, clients: null, address: REQUESTER, chainId: 31337, balanceWei: 10n ** 22n },
  session: { address: REQUESTER },
} as unknown as Portal;

function job(over: Partial<JobView>): JobView {
  return {
    id: '0193a1b2-0000-7000-8000-000000000001',
    requester: REQUESTER,
    kind: 'federated',
    status: 'awaiting_funding',
    spec: { stake: { amount: '500000000000000000' } } as unknown as JobView['spec'],
    stake_wei: '500000000000000000',
    shards: 2,
    rounds: 1,
    current_round: 0,
    deadline: '2030-01-01T00:00:00Z',
    dev_funded: false,
    created_at: '2029-12-01T00:00:00Z',
    updated_at: '2029-12-01T00:00:00Z',
    funding: {
      token: '0x0000000000000000000000000000000000000000',
      stake_wei: '500000000000000000',
      spec_cid: 'bafkreih5aznjvttude6c3wbvqeebb6rlx5wkbzyppv7garjiubll2ceym4',
      deadline_unix: 1893456000,
      kind: 1,
      max_fee_bps: 1000,
    },
    ...over,
  };
}

const render = (j: JobView, funded: { escrow_job_id: string; tx_hash: string } | null) =>
  renderToStaticMarkup(
    <PortalContext.Provider value={portal}>
      <FundPanel job={j} funded={funded} onStarted={() => {}} onFunded={async () => {}} />
    </PortalContext.Provider>,
  );

describe('FundPanel', () => {
  it('offers the escrow call while the job awaits funding', () => {
    const html = render(job({}), null);
    expect(html).toContain('Fund the escrow');
    expect(html).not.toContain('awaits funding');
  });

  it('says nothing of awaiting funding once the job is open (the panel stays on the page that funded it)', () => {
    // What the page that funded the job renders once the marketplace opened it: the job row
    // carries no funding terms any more, the feed has its `funded` event.
    const html = render(
      job({ status: 'open', funding: null, current_round: 1, escrow_job_id: '1', escrow_address: ESCROW }),
      { escrow_job_id: '1', tx_hash: `0x${'ab'.repeat(32)}` },
    );
    expect(html).not.toContain('awaits funding');
    expect(html).not.toContain('has not said how');
    expect(html).not.toContain('alert--warning');
    expect(html).not.toContain('Fund the escrow');
  });

  it('says nothing of awaiting funding on a job that ran to completion before the confirmation showed', () => {
    const html = render(job({ status: 'completed', funding: null, current_round: 1, escrow_job_id: '1' }), null);
    expect(html).toBe('');
  });

  it('warns only when a job awaiting funding comes without terms to fund it by', () => {
    const html = render(job({ funding: null }), null);
    expect(html).toContain('alert--warning');
    expect(html).toContain('awaits funding, but the server has not said how');
  });
});
