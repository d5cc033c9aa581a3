// Names for the generated schema types the portal uses, in one place: when the spec renames a
// schema, this file is the one to follow.
import type { components } from './schema';
import { ENUMS } from './enums';
import type { Funding } from '../wallet/escrow';

type Schemas = components['schemas'];

export type JobView = Schemas['JobView'];
export type JobPage = Schemas['JobPage'];
/** One event of a job's feed, with its id and time: a `JobEvent` as the API serves it. */
export type EventView = Schemas['EventView'];
/** What happened to a job: `kind` names it and decides the shape of `payload`. */
export type JobEvent = Schemas['JobEvent'];
export type QuoteResponse = Schemas['QuoteResponse'];
export type NonceResponse = Schemas['NonceResponse'];
export type TokenResponse = Schemas['TokenResponse'];
export type ChainInfo = Schemas['ChainInfo'];
export type JobResult = Schemas['JobResult'];
/** A job's training curves per task and held-out metric per round (`GET /v1/jobs/{id}/progress`). */
export type TrainingProgress = Schemas['JobProgress'];

/**
 * What funding an `awaiting_funding` job takes: its terms, sent to the escrow of the chain the
 * API follows. Null while either is unknown.
 */
export function fundingOf(job: JobView, chain: { chainId: number | null; escrowAddress: string | null }): Funding | null {
  const terms = job.funding;
  const escrow = chain.escrowAddress ?? job.escrow_address ?? null;
  if (!terms || !escrow || chain.chainId === null) return null;
  return { ...terms, chain_id: chain.chainId, escrow_address: escrow };
}

/** Every job status, in the server's order (generated from the API's document). */
export const JOB_STATUSES = ENUMS.JobStatus;
export type JobStatus = Schemas['JobStatus'];
/** The held-out metric a job's adapters are judged by (`loss`, `accuracy`, `dpo_loss`). */
export type HeldOutMetric = Schemas['HeldOutMetric'];
/** Where a submission's proof of training stands: checked after its verdict, before the payout. */
export type ProofStatus = Schemas['ProofStatus'];

export function isTerminal(status: JobStatus): boolean {
  return status === 'completed' || status === 'cancelled' || status === 'refunded';
}
