//! `shardwork worker earnings`, `withdraw`, `bond`, `unbond` and `complete-unbond`: what a
//! worker's address has earned and bonded, pulling earnings out of the escrow, and managing the
//! bond that bonded jobs ask for (decisions/0044).
//!
//! The escrow pays by pull: a payout credits each contributor in the contract, and the credit
//! waits there until the contributor calls `withdraw`. So credit and reputation are read from
//! the escrow itself, over the chain's JSON-RPC, and withdrawals are signed with the worker's
//! own key; the API adds only what it alone knows (the submissions by verdict, and which
//! escrow and chain it follows). The assets looked at are ether and every token the escrow has
//! ever allow-listed (its `TokenAllowed` events): a token taken off the list keeps its credits.

use alloy::primitives::utils::format_ether;
use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, bail};
use serde::Serialize;
use shardwork_client::ApiClient;
use shardwork_contracts::bindings::JobEscrow::JobEscrowEvents;
use shardwork_contracts::ledger::rpc::{RpcConfig, RpcLedger};
use shardwork_contracts::ledger::{ETH, Ledger};
use shardwork_core::protocol::VerdictStatus;

use crate::config::{ChainKind, Config, redact_url};
use crate::nodes::ApiKeyArgs;

/// What an operator does with a worker's earnings.
#[derive(Debug, clap::Subcommand)]
pub enum WorkerAction {
    /// The worker's credit in the escrow per asset, its on-chain reputation and its
    /// submissions by verdict.
    Earnings(OperatorArgs),
    /// Withdraw everything the escrow credits the worker, in every asset, to its own address
    /// or to `--to`. Sends nothing (and says so) when there is nothing to withdraw.
    Withdraw {
        #[command(flatten)]
        operator: OperatorArgs,
        /// Where the funds go (default: the worker's own address).
        #[arg(long)]
        to: Option<Address>,
    },
    /// Bond stake in the escrow: a job with `validation.bond_multiple` leases the worker its
    /// tasks only while its active bond (in the job's token) covers them. A token is approved
    /// for the escrow first.
    Bond {
        #[command(flatten)]
        operator: OperatorArgs,
        /// In the asset's smallest unit (wei for ether).
        #[arg(long)]
        amount: U256,
        /// An allow-listed ERC-20 (default: ether).
        #[arg(long)]
        token: Option<Address>,
    },
    /// Start withdrawing part of the bond: it stops backing claims now and can be credited
    /// back (`complete-unbond`) after the escrow's unbonding delay (14 days).
    Unbond {
        #[command(flatten)]
        operator: OperatorArgs,
        #[arg(long)]
        amount: U256,
        #[arg(long)]
        token: Option<Address>,
    },
    /// Credit what finished unbonding, to be withdrawn with `withdraw`.
    CompleteUnbond {
        #[command(flatten)]
        operator: OperatorArgs,
        #[arg(long)]
        token: Option<Address>,
    },
}

/// How an operator command reaches the API and the chain.
#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    /// The API and the worker's key.
    #[command(flatten)]
    pub reach: ApiKeyArgs,
    /// JSON-RPC URL of the chain the API follows (default: the configuration's
    /// `chain.rpc_url` when `chain.kind` is `rpc`).
    #[arg(long)]
    pub rpc: Option<String>,
    /// First block to look for the escrow's allow-listed tokens in (its deployment block
    /// saves a public node a long log search).
    #[arg(long, default_value_t = 0)]
    pub from_block: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One asset's credit.
#[derive(Debug, Clone, Serialize)]
pub struct Credit {
    /// The ERC-20's address, or the zero address for ether.
    pub token: Address,
    /// "ETH" or the token's address.
    pub asset: String,
    /// In the asset's smallest unit (wei for ether), as a decimal string.
    #[serde(serialize_with = "decimal")]
    pub amount: U256,
}

/// `shardwork worker earnings`.
#[derive(Debug, Serialize)]
pub struct EarningsReport {
    pub address: Address,
    pub chain_id: u64,
    pub escrow: Address,
    /// On-chain reputation, basis points.
    pub reputation_bps: u16,
    /// What can be withdrawn now, per asset (ether always listed, tokens when non-zero).
    pub credit: Vec<Credit>,
    /// The bond per asset (ether always listed, tokens when any is bonded or unbonding).
    pub bonds: Vec<BondReport>,
    /// The API's profile of the worker (`GET /v1/workers/me`); absent when the address never
    /// registered as a worker there.
    pub profile: Option<serde_json::Value>,
}

/// One asset's bond.
#[derive(Debug, Clone, Serialize)]
pub struct BondReport {
    pub token: Address,
    pub asset: String,
    /// Backs the tasks the worker may be leased now.
    #[serde(serialize_with = "decimal")]
    pub active: U256,
    /// Asked back: credited at `unlock_at`, slashable until then.
    #[serde(serialize_with = "decimal")]
    pub unbonding: U256,
    /// Unix seconds; 0 when nothing is unbonding.
    pub unlock_at: u64,
}

/// A bond transaction sent.
#[derive(Debug, Serialize)]
pub struct BondChange {
    pub address: Address,
    pub action: &'static str,
    pub tx_hash: String,
    /// The bond after it.
    pub bond: BondReport,
}

/// One withdrawal sent.
#[derive(Debug, Serialize)]
pub struct Withdrawal {
    pub token: Address,
    pub asset: String,
    #[serde(serialize_with = "decimal")]
    pub amount: U256,
    pub to: Address,
    pub tx_hash: String,
}

/// `shardwork worker withdraw`.
#[derive(Debug, Serialize)]
pub struct WithdrawReport {
    pub address: Address,
    pub withdrawn: Vec<Withdrawal>,
}

impl WorkerAction {
    fn operator(&self) -> &OperatorArgs {
        match self {
            WorkerAction::Earnings(operator)
            | WorkerAction::Withdraw { operator, .. }
            | WorkerAction::Bond { operator, .. }
            | WorkerAction::Unbond { operator, .. }
            | WorkerAction::CompleteUnbond { operator, .. } => operator,
        }
    }
}

pub async fn run(config: Config, action: WorkerAction) -> anyhow::Result<()> {
    let key = crate::nodes::node_key(action.operator().reach.key_file.as_deref())?;
    match action {
        WorkerAction::Earnings(args) => {
            let session = Session::open(&config, key, &args).await?;
            let report = session.earnings().await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_earnings(&report);
            }
        }
        WorkerAction::Withdraw { operator, to } => {
            if to == Some(Address::ZERO) {
                bail!("--to: the zero address cannot receive a withdrawal");
            }
            let session = Session::open(&config, key, &operator).await?;
            let report = session.withdraw(to).await?;
            if operator.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else if report.withdrawn.is_empty() {
                println!("nothing to withdraw for {:#x}", report.address);
            } else {
                for w in &report.withdrawn {
                    println!(
                        "withdrew {} to {:#x} (tx {})",
                        amount_text(w.token, w.amount),
                        w.to,
                        w.tx_hash
                    );
                }
            }
        }
        WorkerAction::Bond {
            operator,
            amount,
            token,
        } => {
            let session = Session::open(&config, key, &operator).await?;
            let change = session.bond(token.unwrap_or(ETH), amount).await?;
            print_change(&change, operator.json)?;
        }
        WorkerAction::Unbond {
            operator,
            amount,
            token,
        } => {
            let session = Session::open(&config, key, &operator).await?;
            let change = session.unbond(token.unwrap_or(ETH), amount).await?;
            print_change(&change, operator.json)?;
        }
        WorkerAction::CompleteUnbond { operator, token } => {
            let session = Session::open(&config, key, &operator).await?;
            let change = session.complete_unbond(token.unwrap_or(ETH)).await?;
            print_change(&change, operator.json)?;
        }
    }
    Ok(())
}

fn print_change(change: &BondChange, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(change)?);
    } else {
        println!(
            "{} sent (tx {}); {}",
            change.action,
            change.tx_hash,
            bond_text(&change.bond)
        );
    }
    Ok(())
}

fn bond_text(b: &BondReport) -> String {
    let mut text = format!("bond {} active", amount_text(b.token, b.active));
    if !b.unbonding.is_zero() {
        let at = chrono::DateTime::from_timestamp(b.unlock_at as i64, 0)
            .map_or_else(|| b.unlock_at.to_string(), |t| t.to_rfc3339());
        text.push_str(&format!(
            ", {} unbonding until {at}",
            amount_text(b.token, b.unbonding)
        ));
    }
    text
}

/// The API, the chain and the escrow, as one worker key sees them.
struct Session {
    api: ApiClient,
    ledger: RpcLedger,
    account: Address,
    chain_id: u64,
    escrow: Address,
    from_block: u64,
}

impl Session {
    async fn open(
        config: &Config,
        key: PrivateKeySigner,
        args: &OperatorArgs,
    ) -> anyhow::Result<Self> {
        let rpc = rpc_url(config, args)?;
        let account = key.address();
        let api = ApiClient::new(&args.reach.api, key.clone(), &["worker"])?;
        let chain = api.chain_info().await.with_context(|| {
            format!(
                "asking {} which chain and escrow it follows",
                args.reach.api
            )
        })?;
        let chain_id = chain["chain_id"]
            .as_u64()
            .context("GET /v1/chain: no chain_id")?;
        let escrow: Address = chain["escrow_address"]
            .as_str()
            .context("GET /v1/chain: no escrow_address")?
            .parse()
            .context("GET /v1/chain: escrow_address is not an address")?;
        let ledger = RpcLedger::connect(RpcConfig::new(rpc.clone()), vec![key])
            .await
            .with_context(|| format!("connecting to the chain at {}", redact_url(&rpc)))?;
        let rpc_chain = ledger.chain_id().await.context("reading the chain id")?;
        if rpc_chain != chain_id {
            bail!(
                "--rpc reaches chain {rpc_chain}, but the API at {} follows chain {chain_id}",
                args.reach.api
            );
        }
        Ok(Session {
            api,
            ledger,
            account,
            chain_id,
            escrow,
            from_block: args.from_block,
        })
    }

    /// Ether, then every token the escrow ever allow-listed, in the order it listed them.
    async fn assets(&self) -> anyhow::Result<Vec<Address>> {
        let events = self
            .ledger
            .events(self.escrow, self.from_block, None)
            .await
            .context("reading the escrow's allow-listed tokens")?;
        let mut assets = vec![ETH];
        for e in events {
            if let JobEscrowEvents::TokenAllowed(t) = e.event
                && !assets.contains(&t.token)
            {
                assets.push(t.token);
            }
        }
        Ok(assets)
    }

    /// Credit per asset: ether always, tokens when non-zero.
    async fn credit(&self) -> anyhow::Result<Vec<Credit>> {
        let mut credit = Vec::new();
        for token in self.assets().await? {
            let amount = self
                .ledger
                .withdrawable(self.escrow, self.account, token)
                .await
                .with_context(|| format!("reading the credit in {}", asset_name(token)))?;
            if token == ETH || amount > U256::ZERO {
                credit.push(Credit {
                    token,
                    asset: asset_name(token),
                    amount,
                });
            }
        }
        Ok(credit)
    }

    async fn bond_in(&self, token: Address) -> anyhow::Result<BondReport> {
        let b = self
            .ledger
            .bond_of(self.escrow, self.account, token)
            .await
            .with_context(|| format!("reading the bond in {}", asset_name(token)))?;
        Ok(BondReport {
            token,
            asset: asset_name(token),
            active: b.active,
            unbonding: b.unbonding,
            unlock_at: b.unlock_at,
        })
    }

    /// Bond per asset: ether always, tokens when any is bonded or unbonding.
    async fn bonds(&self) -> anyhow::Result<Vec<BondReport>> {
        let mut bonds = Vec::new();
        for token in self.assets().await? {
            let b = self.bond_in(token).await?;
            if token == ETH || !(b.active.is_zero() && b.unbonding.is_zero()) {
                bonds.push(b);
            }
        }
        Ok(bonds)
    }

    async fn bond(&self, token: Address, amount: U256) -> anyhow::Result<BondChange> {
        if amount.is_zero() {
            bail!("--amount: bond more than 0");
        }
        if token != ETH {
            self.ledger
                .approve(token, self.account, self.escrow, amount)
                .await
                .with_context(|| format!("approving {} for the escrow", asset_name(token)))?;
        }
        let outcome = self
            .ledger
            .bond(self.escrow, self.account, token, amount)
            .await
            .with_context(|| format!("bonding {}", amount_text(token, amount)))?;
        self.changed("bond", token, &outcome).await
    }

    async fn unbond(&self, token: Address, amount: U256) -> anyhow::Result<BondChange> {
        let active = self.bond_in(token).await?.active;
        if amount.is_zero() || amount > active {
            bail!(
                "--amount: {} is not within the active bond of {}",
                amount_text(token, amount),
                amount_text(token, active)
            );
        }
        let outcome = self
            .ledger
            .request_unbond(self.escrow, self.account, token, amount)
            .await
            .context("asking to unbond")?;
        self.changed("unbond", token, &outcome).await
    }

    async fn complete_unbond(&self, token: Address) -> anyhow::Result<BondChange> {
        let b = self.bond_in(token).await?;
        if b.unbonding.is_zero() {
            bail!(
                "nothing of {:#x}'s bond in {} is unbonding",
                self.account,
                b.asset
            );
        }
        let now = self.ledger.block_timestamp().await?;
        if now < b.unlock_at {
            bail!(
                "{} unbonds at {}, {} s from the chain's time now; try again then",
                amount_text(token, b.unbonding),
                chrono::DateTime::from_timestamp(b.unlock_at as i64, 0)
                    .map_or_else(|| b.unlock_at.to_string(), |t| t.to_rfc3339()),
                b.unlock_at - now
            );
        }
        let outcome = self
            .ledger
            .complete_unbond(self.escrow, self.account, token)
            .await
            .context("completing the unbonding")?;
        self.changed("complete-unbond", token, &outcome).await
    }

    async fn changed(
        &self,
        action: &'static str,
        token: Address,
        outcome: &shardwork_contracts::ledger::TxOutcome,
    ) -> anyhow::Result<BondChange> {
        Ok(BondChange {
            address: self.account,
            action,
            tx_hash: format!("{:#x}", outcome.tx_hash),
            bond: self.bond_in(token).await?,
        })
    }

    async fn earnings(&self) -> anyhow::Result<EarningsReport> {
        let profile = match self.api.worker_profile().await {
            Ok(profile) => Some(profile),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e).context("reading the worker's profile from the API"),
        };
        Ok(EarningsReport {
            address: self.account,
            chain_id: self.chain_id,
            escrow: self.escrow,
            reputation_bps: self
                .ledger
                .reputation(self.escrow, self.account)
                .await
                .context("reading the reputation")?,
            credit: self.credit().await?,
            bonds: self.bonds().await?,
            profile,
        })
    }

    async fn withdraw(&self, to: Option<Address>) -> anyhow::Result<WithdrawReport> {
        let mut withdrawn = Vec::new();
        for c in self.credit().await? {
            if c.amount.is_zero() {
                continue;
            }
            let (amount, outcome) = match to {
                Some(to) if to != self.account => {
                    self.ledger
                        .withdraw_to(self.escrow, self.account, c.token, to)
                        .await
                }
                _ => {
                    self.ledger
                        .withdraw(self.escrow, self.account, c.token)
                        .await
                }
            }
            .with_context(|| format!("withdrawing {}", c.asset))?;
            withdrawn.push(Withdrawal {
                token: c.token,
                asset: c.asset,
                amount,
                to: to.unwrap_or(self.account),
                tx_hash: format!("{:#x}", outcome.tx_hash),
            });
        }
        Ok(WithdrawReport {
            address: self.account,
            withdrawn,
        })
    }
}

/// The chain's JSON-RPC URL: `--rpc`, else the configuration's when its chain is a JSON-RPC one.
fn rpc_url(config: &Config, args: &OperatorArgs) -> anyhow::Result<String> {
    match (&args.rpc, config.chain.kind) {
        (Some(url), _) => Ok(url.clone()),
        (None, ChainKind::Rpc) => Ok(config.chain.rpc_url.clone()),
        (None, ChainKind::Embedded) => bail!(
            "no chain to reach: the configuration's chain is the embedded one, which lives \
             inside the API process and has no JSON-RPC endpoint; pass --rpc URL (or set \
             SHARDWORK_CHAIN__KIND=rpc and SHARDWORK_CHAIN__RPC_URL) for the chain the API \
             follows"
        ),
    }
}

fn asset_name(token: Address) -> String {
    if token == ETH {
        "ETH".into()
    } else {
        format!("{token:#x}")
    }
}

/// A U256 as the decimal string JSON readers expect (serde's default is 0x-hex).
fn decimal<S: serde::Serializer>(amount: &U256, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&amount.to_string())
}

/// "0.5 ETH (500000000000000000 wei)", or "1000 of token 0x…".
fn amount_text(token: Address, amount: U256) -> String {
    if token == ETH {
        let text = format_ether(amount);
        let ether = match text.split_once('.') {
            Some((whole, fraction)) if fraction.trim_end_matches('0').is_empty() => whole,
            Some(_) => text.trim_end_matches('0'),
            None => &text,
        };
        format!("{ether} ETH ({amount} wei)")
    } else {
        format!("{amount} of token {token:#x}")
    }
}

fn print_earnings(r: &EarningsReport) {
    println!(
        "worker {:#x} on chain {}, escrow {:#x}",
        r.address, r.chain_id, r.escrow
    );
    println!(
        "reputation  {} bps ({:.2}%)",
        r.reputation_bps,
        f64::from(r.reputation_bps) / 100.0
    );
    for c in &r.credit {
        println!(
            "credit      {}  (withdraw with `shardwork worker withdraw`)",
            amount_text(c.token, c.amount)
        );
    }
    for b in &r.bonds {
        println!(
            "{:<11} {}  (bonded jobs lease against the active part)",
            "bond",
            bond_text(b)
        );
    }
    match &r.profile {
        Some(p) => {
            if let Some(paid) = p["earnings_wei"].as_str().and_then(|w| w.parse().ok()) {
                println!(
                    "paid so far {} by ETH-staked jobs, as the API recorded",
                    amount_text(ETH, paid)
                );
            }
            let n =
                |verdict: VerdictStatus| p["submissions"][verdict.as_str()].as_u64().unwrap_or(0);
            println!(
                "submissions {} accepted, {} rejected, {} pending",
                n(VerdictStatus::Accepted),
                n(VerdictStatus::Rejected),
                n(VerdictStatus::Pending)
            );
        }
        None => println!("submissions none: this address never registered as a worker"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator(rpc: Option<&str>) -> OperatorArgs {
        OperatorArgs {
            reach: ApiKeyArgs {
                api: "http://127.0.0.1:1".into(),
                key_file: None,
            },
            rpc: rpc.map(str::to_owned),
            from_block: 0,
            json: false,
        }
    }

    #[test]
    fn the_embedded_chain_needs_an_rpc_url_named() {
        let config = Config::default();
        assert_eq!(config.chain.kind, ChainKind::Embedded);
        let err = rpc_url(&config, &operator(None)).unwrap_err().to_string();
        assert!(err.contains("--rpc URL"), "{err}");
        assert_eq!(
            rpc_url(&config, &operator(Some("http://node:8545"))).unwrap(),
            "http://node:8545"
        );
        let mut on_rpc = Config::default();
        on_rpc.chain.kind = ChainKind::Rpc;
        on_rpc.chain.rpc_url = "http://anvil:8545".into();
        assert_eq!(
            rpc_url(&on_rpc, &operator(None)).unwrap(),
            "http://anvil:8545"
        );
    }

    #[test]
    fn amounts_read_as_ether_and_token_units() {
        assert_eq!(
            amount_text(ETH, U256::from(500_000_000_000_000_000u64)),
            "0.5 ETH (500000000000000000 wei)"
        );
        assert_eq!(amount_text(ETH, U256::ZERO), "0 ETH (0 wei)");
        assert_eq!(
            amount_text(ETH, U256::from(2_000_000_000_000_000_000u64)),
            "2 ETH (2000000000000000000 wei)"
        );
        let token = Address::repeat_byte(0xab);
        assert_eq!(
            amount_text(token, U256::from(1000u64)),
            format!("1000 of token {token:#x}")
        );
    }
}
