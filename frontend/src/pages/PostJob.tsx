// Post a job: the spec form with inline validation (ours first, then the server's problem+json
// errors on the same inputs), the dataset, a quote, and the upload with its progress.
import { useRef, useState, type FormEvent, type ReactNode } from 'react';
import { unwrap } from '../api/client';
import { ApiProblem, mapProblemToInputs } from '../api/problem';
import type { QuoteResponse } from '../api/types';
import { postJob, type UploadProgress } from '../api/upload';
import { Alert } from '../components/Alert';
import { Field, fieldDomId } from '../components/Field';
import { SignInFirst } from '../components/Layout';
import { bytes, eth, shortAddress } from '../format';
import { describeShapes, scanDataset, type DatasetScan } from '../jobs/dataset';
import {
  ARCHITECTURE_DEFAULTS,
  checkSpecForm,
  defaultForm,
  SPEC_INPUTS,
  type Architecture,
  type FormErrors,
  type JobSpec,
  type SpecForm,
  type SpecInput,
} from '../jobs/spec';
import { navigate } from '../router';
import { errorMessage, usePortal } from '../state';
import { assetOf, formatAmount, type Asset } from '../wallet/stake';

const INPUTS: ReadonlySet<string> = new Set<string>([...SPEC_INPUTS, 'dataset']);
/** Form order, for focusing the first input in error. */
const ORDER = [...SPEC_INPUTS, 'dataset'] as const;

type Stage =
  | { step: 'edit' }
  | { step: 'quoting' }
  | { step: 'quoted'; quote: QuoteResponse; spec: JobSpec }
  | { step: 'uploading'; progress: UploadProgress | null }
  | { step: 'done'; id: string };

export function PostJob() {
  const p = usePortal();
  const [form, setForm] = useState<SpecForm>(() => defaultForm(new Date()));
  const [file, setFile] = useState<File | null>(null);
  const [scan, setScan] = useState<DatasetScan | null>(null);
  const [errors, setErrors] = useState<FormErrors>({});
  const [general, setGeneral] = useState<string[]>([]);
  const [stage, setStage] = useState<Stage>({ step: 'edit' });
  const summary = useRef<HTMLDivElement>(null);
  const abort = useRef<AbortController | null>(null);

  if (!p.session) return <SignInFirst what="post a job" />;

  const set = (path: SpecInput, value: string) => {
    setForm((f) => {
      const next = { ...f, [path]: value };
      if (path === 'base_model.architecture') {
        const d = ARCHITECTURE_DEFAULTS[value as Architecture];
        if (d) {
          next['base_model.task'] = d.task;
          next['lora.target_modules'] = d.targets;
          next['lora.modules_to_save'] = d.save;
          next['base_model.num_labels'] = d.task === 'sequence_classification' ? f['base_model.num_labels'] || '2' : '';
        }
      }
      // num_labels belongs to classification only; a hidden input must not carry a stale value
      // the checks would then refuse.
      if (path === 'base_model.task') {
        next['base_model.num_labels'] = value === 'sequence_classification' ? f['base_model.num_labels'] || '2' : '';
      }
      if (path === 'kind' && value === 'lora') {
        next.shards = '1';
        next.rounds = '1';
      }
      return next;
    });
    // An edited input's old errors no longer describe it; and the quote no longer matches.
    setErrors((e) => ({ ...e, [path]: undefined }));
    if (stage.step === 'quoted') setStage({ step: 'edit' });
  };

  const showErrors = (next: FormErrors, messages: string[]) => {
    setErrors(next);
    setGeneral(messages);
    const first = ORDER.find((k) => next[k]?.length);
    // Focus the summary so the count is announced, then the user tabs or clicks to each input.
    requestAnimationFrame(() => {
      if (messages.length || !first) summary.current?.focus();
      else document.getElementById(fieldDomId(first))?.focus();
    });
  };

  const onFile = async (f: File | null) => {
    setFile(f);
    setScan(null);
    setErrors((e) => ({ ...e, dataset: undefined }));
    if (stage.step === 'quoted') setStage({ step: 'edit' });
    if (f) setScan(await scanDataset(f));
  };

  const check = (): JobSpec | null => {
    const { spec, errors: found } = checkSpecForm(form, new Date(), p.chain.tokens);
    const all: FormErrors = { ...found };
    if (!file) all.dataset = ['choose a JSONL file with one record per line'];
    else if (scan && scan.errors.length) all.dataset = scan.errors;
    else if (scan && scan.records < 2) all.dataset = [`${scan.records} records cannot give both a held-out set and training data`];
    if (!spec || Object.keys(all).length) {
      showErrors(all, []);
      return null;
    }
    return spec;
  };

  const fromProblem = (err: unknown) => {
    if (err instanceof ApiProblem) {
      const mapped = mapProblemToInputs(err.problem, INPUTS);
      showErrors(mapped.byInput as FormErrors, mapped.general);
    } else {
      showErrors({}, [errorMessage(err)]);
    }
  };

  const quote = async (e: FormEvent) => {
    e.preventDefault();
    const spec = check();
    if (!spec || !scan) return;
    setStage({ step: 'quoting' });
    setGeneral([]);
    try {
      const q = await unwrap(p.api.POST('/v1/jobs/quote', { body: { spec, dataset_records: scan.records } }));
      setStage({ step: 'quoted', quote: q, spec });
    } catch (err) {
      setStage({ step: 'edit' });
      fromProblem(err);
    }
  };

  const post = async () => {
    if (stage.step !== 'quoted' || !file) return;
    const spec = stage.spec;
    setStage({ step: 'uploading', progress: null });
    abort.current = new AbortController();
    try {
      const token = await p.keeper.accessToken();
      if (!token) throw new Error('You are signed out. Sign in again to post.');
      const job = await postJob({
        spec,
        dataset: file,
        datasetName: file.name,
        token,
        signal: abort.current.signal,
        onProgress: (progress) => setStage({ step: 'uploading', progress }),
      });
      setStage({ step: 'done', id: job.id });
      navigate(`/jobs/${job.id}`);
    } catch (err) {
      setStage({ step: 'edit' });
      if (err instanceof DOMException && err.name === 'AbortError') setGeneral(['The upload was cancelled.']);
      else fromProblem(err);
    }
  };

  const busy = stage.step === 'quoting' || stage.step === 'uploading';
  const stakeAsset = assetOf(form['stake.token'], p.chain.tokens);
  const count = Object.values(errors).filter((v) => v?.length).length;
  const field = (path: SpecInput, label: string, input: (a: ReturnType<typeof aria>) => ReactNode, hint?: ReactNode) => (
    <Field id={path} label={label} hint={hint} errors={errors[path]}>
      {(a) => input(a)}
    </Field>
  );
  const aria = (a: { id: string; 'aria-invalid': boolean; 'aria-describedby': string | undefined }) => a;
  const text = (path: SpecInput, label: string, hint?: ReactNode, inputMode?: 'numeric' | 'decimal') =>
    field(
      path,
      label,
      (a) => (
        <input {...a} name={path} value={form[path]} inputMode={inputMode} disabled={busy} onChange={(e) => set(path, e.target.value)} />
      ),
      hint,
    );
  const select = (path: SpecInput, label: string, options: [string, string][], hint?: ReactNode) =>
    field(
      path,
      label,
      (a) => (
        <select {...a} name={path} value={form[path]} disabled={busy} onChange={(e) => set(path, e.target.value)}>
          {options.map(([v, l]) => (
            <option key={v} value={v}>
              {l}
            </option>
          ))}
        </select>
      ),
      hint,
    );

  return (
    <form className="job-form" onSubmit={quote} noValidate>
      {(count > 0 || general.length > 0) && (
        <div className="alert alert--error error-summary" role="alert" tabIndex={-1} ref={summary}>
          <h2>{count > 0 ? `${count} field${count === 1 ? '' : 's'} need${count === 1 ? 's' : ''} attention` : 'The job was not accepted'}</h2>
          <ul>
            {ORDER.filter((k) => errors[k]?.length).map((k) => (
              <li key={k}>
                <a href={`#${fieldDomId(k)}`}>
                  {k}: {errors[k]![0]}
                </a>
              </li>
            ))}
            {general.map((g, i) => (
              <li key={`g${i}`}>{g}</li>
            ))}
          </ul>
        </div>
      )}

      <fieldset>
        <legend>Job</legend>
        {select('kind', 'Kind', [
          ['federated', 'Federated: shards and rounds, merged each round'],
          ['lora', 'LoRA: one contributor, one shard'],
        ])}
      </fieldset>

      <fieldset>
        <legend>Base model</legend>
        {text('base_model.cid', 'Model CID', 'The base model in the content store (Qm… or bafy…).')}
        <div className="grid">
          {select('base_model.format', 'Format', [
            ['safetensors', 'safetensors'],
            ['gguf', 'GGUF'],
          ])}
          {select('base_model.architecture', 'Architecture', [
            ['bert', 'BERT family (encoder)'],
            ['llama', 'Llama family (decoder)'],
          ])}
          {select('base_model.task', 'Task', [
            ['sequence_classification', 'Sequence classification'],
            ['causal_lm', 'Causal LM (SFT)'],
          ])}
          {form['base_model.task'] === 'sequence_classification' &&
            text('base_model.num_labels', 'Labels', '2 to 1000 classes.', 'numeric')}
        </div>
        {text(
          'base_model.adapter',
          'Continue from adapter (optional)',
          'The result CID of one of your completed jobs, or an unsealed PEFT adapter bundle: round 1 trains from it and is judged against it. Its LoRA settings must be the ones below.',
        )}
      </fieldset>

      <fieldset>
        <legend>LoRA</legend>
        <div className="grid">
          {text('lora.r', 'Rank (r)', '1 to 256.', 'numeric')}
          {text('lora.alpha', 'Alpha', 'Scale; often 2 × r.', 'decimal')}
          {text('lora.dropout', 'Dropout', '0 to just under 1.', 'decimal')}
        </div>
        {text('lora.target_modules', 'Target modules', 'Comma-separated layer names, e.g. query, value or q_proj, v_proj.')}
        {text('lora.modules_to_save', 'Modules trained in full', 'Optional, e.g. classifier for a classification head.')}
      </fieldset>

      <fieldset>
        <legend>Training</legend>
        <div className="grid">
          {text('training.epochs', 'Epochs', '1 to 100.', 'numeric')}
          {text('training.learning_rate', 'Learning rate', 'Above 0, at most 1.', 'decimal')}
          {text('training.batch_size', 'Batch size', '1 to 4096.', 'numeric')}
          {text('training.max_seq_len', 'Sequence length', '8 to 32768 tokens.', 'numeric')}
          {text('training.seed', 'Seed', 'Fixes the shuffle, split, shards and initialisation.', 'numeric')}
          {select(
            'training.schedule',
            'Learning-rate schedule',
            [
              ['task', 'Per task: each warms up and decays'],
              ['job', 'Over the job: one across all rounds'],
            ],
            'Over the job suits many short rounds; per task suits two or three.',
          )}
          {form['base_model.task'] === 'causal_lm' &&
            text(
              'training.dpo.beta',
              'Preference (DPO) beta',
              'Empty: supervised training. A beta (0.1 is usual): DPO on {"prompt","chosen","rejected"} pairs against the starting point (the base model, or the adapter above).',
              'decimal',
            )}
        </div>
      </fieldset>

      <fieldset>
        <legend>Sharding and scoring</legend>
        <div className="grid">
          {text('shards', 'Shards', 'One contributor per shard.', 'numeric')}
          {text('rounds', 'Rounds', 'Merges between rounds.', 'numeric')}
          {text('held_out_fraction', 'Held-out fraction', 'Kept from workers to score them; at most 0.5.', 'decimal')}
          {text('min_reputation', 'Minimum reputation', 'Basis points, 0 to 10000.', 'numeric')}
        </div>
      </fieldset>

      <fieldset>
        <legend>Deadline and stake</legend>
        <div className="grid">
          {field(
            'deadline',
            'Deadline',
            (a) => (
              <input {...a} type="datetime-local" name="deadline" value={form.deadline} disabled={busy} onChange={(e) => set('deadline', e.target.value)} />
            ),
            'Your local time. Unfinished by then, the stake is refunded.',
          )}
          {select(
            'stake.token',
            'Stake in',
            [
              ['', 'ETH'],
              ...p.chain.tokens.map((t): [string, string] => [t.address, `${t.symbol ?? 'token'} (${shortAddress(t.address)})`]),
            ],
            p.chain.tokens.length
              ? 'ETH, or a token the escrow accepts: you approve the escrow for the stake when you fund.'
              : 'This escrow accepts no token besides ETH.',
          )}
          {text(
            'stake.amount',
            `Stake (${stakeAsset.symbol})`,
            'Escrowed when you fund the job; pays the contributors.',
            'decimal',
          )}
        </div>
      </fieldset>

      <fieldset>
        <legend>Dataset</legend>
        <Field
          id="dataset"
          label="Dataset (JSONL)"
          hint={
            form['base_model.task'] === 'sequence_classification' ? (
              'One {"text", "label"} record per line.'
            ) : (
              <>
                One record per line: a chat <code>{'{"messages": [{"role": "user", "content": …}, {"role": "assistant", …}]}'}</code>,
                an instruction <code>{'{"instruction", "input", "output"}'}</code>, or <code>{'{"prompt", "completion"}'}</code> or{' '}
                <code>{'{"text"}'}</code>. Only the answers (assistant turns, output, completion) are learned.
              </>
            )
          }
          errors={errors.dataset}
        >
          {(a) => (
            <input
              {...a}
              type="file"
              name="dataset"
              accept=".jsonl,.json,application/jsonl,application/x-ndjson,text/plain"
              disabled={busy}
              onChange={(e) => void onFile(e.target.files?.[0] ?? null)}
            />
          )}
        </Field>
        {file && scan && (
          <p className="muted" data-testid="dataset-scan">
            {file.name}: {scan.records} records, {bytes(scan.bytes)}
            {describeShapes(scan) && `; ${describeShapes(scan)}`}
          </p>
        )}
      </fieldset>

      {stage.step === 'quoted' && <Quote quote={stage.quote} asset={assetOf(stage.spec.stake.token, p.chain.tokens)} />}

      {stage.step === 'uploading' && (
        <div className="upload">
          <label htmlFor="upload-progress">Uploading the dataset</label>
          <progress
            id="upload-progress"
            max={stage.progress?.total ?? 1}
            value={stage.progress?.loaded ?? 0}
            aria-valuetext={stage.progress ? `${bytes(stage.progress.loaded)} of ${bytes(stage.progress.total)}` : 'starting'}
          />
          <span aria-live="polite">
            {stage.progress
              ? stage.progress.loaded >= stage.progress.total
                ? 'Uploaded; the server is splitting the dataset into shards…'
                : `${Math.floor((stage.progress.loaded / stage.progress.total) * 100)}%`
              : 'starting…'}
          </span>{' '}
          <button type="button" onClick={() => abort.current?.abort()}>
            Cancel upload
          </button>
        </div>
      )}

      <div className="actions">
        <button type="submit" disabled={busy}>
          {stage.step === 'quoting' ? 'Quoting…' : 'Get a quote'}
        </button>
        <button type="button" className="primary" disabled={stage.step !== 'quoted'} onClick={() => void post()}>
          Post job
        </button>
      </div>
    </form>
  );
}

function Quote({ quote, asset }: { quote: QuoteResponse; asset: Asset }) {
  return (
    <section className="card quote" aria-labelledby="quote-title" data-testid="quote">
      <h2 id="quote-title">Quote</h2>
      <dl className="facts">
        <div>
          <dt>Price</dt>
          <dd>{eth(quote.price_wei, 6)}</dd>
        </div>
        <div>
          <dt>Your stake</dt>
          <dd>{formatAmount(quote.stake_wei, asset, 6)}</dd>
        </div>
        <div>
          <dt>Adapter</dt>
          <dd>
            {Number(quote.adapter_params).toLocaleString()} parameters, {bytes(Number(quote.adapter_bytes))} (
            {quote.model_shape_source})
          </dd>
        </div>
        <div>
          <dt>Records</dt>
          <dd>
            {quote.training_records} training in shards of {quote.shard_records.join(', ')}; {quote.held_out_records} held out
          </dd>
        </div>
      </dl>
      {quote.stake_covers_price === null || quote.stake_covers_price === undefined ? (
        <Alert kind="info">
          The price is in ETH and the stake in {asset.symbol}: the marketplace knows no exchange rate, so compare them yourself.
        </Alert>
      ) : quote.stake_covers_price ? (
        <Alert kind="success">The stake covers the quoted price.</Alert>
      ) : (
        <Alert kind="warning">
          The stake is below the quoted price: workers may not take the job. Raise the stake, or post anyway.
        </Alert>
      )}
    </section>
  );
}
