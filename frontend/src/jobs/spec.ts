// The job spec (core/src/protocol/job_spec.rs) as a form edits it: every input is a string named
// by the spec path it sets, checked here with the server's own limits and wording so most
// mistakes are caught before a round trip. The server stays the authority: its problem+json
// errors map onto the same inputs (api/problem.ts).
import { parseUnits } from 'viem';
import { assetOf, type StakeToken } from '../wallet/stake';
import { SPEC_LIMITS } from '../api/spec-limits';

// The server's limits reach the portal through the OpenAPI document (src/api/spec-limits.ts is
// generated from it), so a limit changed in job_spec.rs changes here on the next `gen:api`.
const {
  BaseModel: modelLimits,
  DpoArgs: dpoLimits,
  JobSpec: jobLimits,
  LoraSpec: loraLimits,
  TrainingArgs: trainingLimits,
} = SPEC_LIMITS;

export const PROTOCOL_VERSION = jobLimits.version.maximum;
export const MAX_LORA_RANK = loraLimits.r.maximum;
export const MAX_LORA_ALPHA = loraLimits.alpha.maximum;
export const MIN_NUM_LABELS = modelLimits.num_labels.minimum;
export const MAX_NUM_LABELS = modelLimits.num_labels.maximum;
export const MAX_SHARDS = jobLimits.shards.maximum;
export const MAX_ROUNDS = jobLimits.rounds.maximum;
export const MAX_EPOCHS = trainingLimits.epochs.maximum;
export const MAX_BATCH_SIZE = trainingLimits.batch_size.maximum;
export const MAX_LEARNING_RATE = trainingLimits.learning_rate.maximum;
export const MIN_SEQ_LEN = trainingLimits.max_seq_len.minimum;
export const MAX_SEQ_LEN = trainingLimits.max_seq_len.maximum;
export const MAX_HELD_OUT_FRACTION = jobLimits.held_out_fraction.maximum;
export const MAX_REPUTATION_BPS = jobLimits.min_reputation.maximum;
/**
 * Checked by the server against the clock when a job is posted, so the OpenAPI document (a
 * schema of shapes) cannot carry it: kept in step with job_spec.rs by hand.
 */
export const MAX_DEADLINE_DAYS = 365;
/** TrainingArgs defaults: the server fills them in when a spec leaves them out. */
export const DEFAULT_WARMUP_RATIO = trainingLimits.warmup_ratio.default;
export const DEFAULT_GRADIENT_ACCUMULATION = trainingLimits.gradient_accumulation.default;

export type JobKind = 'lora' | 'federated';
export type Architecture = 'llama' | 'bert';
export type TrainingTask = 'causal_lm' | 'sequence_classification';
export type ModelFormat = 'safetensors' | 'gguf';
export type LrSchedule = 'task' | 'job';

/** The spec exactly as `POST /v1/jobs` takes it. */
export interface JobSpec {
  version: number;
  kind: JobKind;
  base_model: {
    cid: string;
    format: ModelFormat;
    architecture: Architecture;
    task: TrainingTask;
    num_labels?: number;
    /** The adapter round 1 continues from: an earlier job's result, or an unsealed PEFT bundle. */
    adapter?: string;
  };
  lora: {
    r: number;
    alpha: number;
    dropout: number;
    target_modules: string[];
    modules_to_save: string[];
  };
  training: {
    epochs: number;
    learning_rate: number;
    batch_size: number;
    max_seq_len: number;
    seed: number;
    warmup_ratio: number;
    gradient_accumulation: number;
    /** What one warmup + cosine spans: each task's own steps, or the whole job's rounds. */
    schedule: LrSchedule;
    /** Present: preference fine-tuning (DPO) on {"prompt","chosen","rejected"} pairs. */
    dpo?: { beta: number };
  };
  shards: number;
  rounds: number;
  held_out_fraction: number;
  min_reputation: number;
  deadline: string;
  stake: { amount: string; token?: string };
}

/** Every input of the form, named by the spec path it edits. */
export const SPEC_INPUTS = [
  'kind',
  'base_model.cid',
  'base_model.format',
  'base_model.architecture',
  'base_model.task',
  'base_model.num_labels',
  'base_model.adapter',
  'lora.r',
  'lora.alpha',
  'lora.dropout',
  'lora.target_modules',
  'lora.modules_to_save',
  'training.epochs',
  'training.learning_rate',
  'training.batch_size',
  'training.max_seq_len',
  'training.seed',
  'training.schedule',
  'training.dpo.beta',
  'shards',
  'rounds',
  'held_out_fraction',
  'min_reputation',
  'deadline',
  'stake.token',
  'stake.amount',
] as const;

export type SpecInput = (typeof SPEC_INPUTS)[number];
export type SpecForm = Record<SpecInput, string>;
export type FormErrors = Partial<Record<SpecInput | 'dataset', string[]>>;

/** Architecture decides both the task and the layer names LoRA targets. */
export const ARCHITECTURE_DEFAULTS: Record<Architecture, { task: TrainingTask; targets: string; save: string }> = {
  bert: { task: 'sequence_classification', targets: 'query, value', save: 'classifier' },
  llama: { task: 'causal_lm', targets: 'q_proj, v_proj', save: '' },
};

/** `datetime-local` value (local time, minutes) `days` from `now`. */
export function localDateTime(now: Date, days: number): string {
  const d = new Date(now.getTime() + days * 86_400_000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export function defaultForm(now: Date): SpecForm {
  return {
    kind: 'federated',
    'base_model.cid': '',
    'base_model.format': 'safetensors',
    'base_model.architecture': 'bert',
    'base_model.task': 'sequence_classification',
    'base_model.num_labels': '2',
    'base_model.adapter': '',
    'lora.r': '8',
    'lora.alpha': '16',
    'lora.dropout': '0.05',
    'lora.target_modules': ARCHITECTURE_DEFAULTS.bert.targets,
    'lora.modules_to_save': ARCHITECTURE_DEFAULTS.bert.save,
    'training.epochs': '1',
    'training.learning_rate': '0.0005',
    'training.batch_size': '16',
    'training.max_seq_len': '128',
    'training.seed': '7',
    'training.schedule': 'task',
    'training.dpo.beta': '',
    shards: '3',
    rounds: '2',
    held_out_fraction: '0.1',
    min_reputation: '0',
    deadline: localDateTime(now, 7),
    'stake.token': '',
    'stake.amount': '0.1',
  };
}

/** Splits a comma- or space-separated list of module names. */
export function moduleList(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}

const MODULE_NAME = /^[A-Za-z0-9_.]{1,128}$/;
// CIDv0 (base58btc, "Qm…") or CIDv1 in base32 ("b…") — the forms Kubo and the API print.
const CID = /^(Qm[1-9A-HJ-NP-Za-km-z]{44}|b[a-z2-7]{20,})$/;

class Collector {
  readonly errors: FormErrors = {};

  add(path: SpecInput | 'dataset', message: string): void {
    (this.errors[path] ??= []).push(message);
  }

  check(ok: boolean, path: SpecInput, message: () => string): void {
    if (!ok) this.add(path, message());
  }

  /** An integer in `lo..=hi`, or an error and NaN. */
  int(form: SpecForm, path: SpecInput, lo: number, hi: number): number {
    const text = form[path].trim();
    if (!/^-?\d+$/.test(text)) {
      this.add(path, text ? `${JSON.stringify(text)} is not a whole number` : 'required');
      return Number.NaN;
    }
    const n = Number(text);
    this.check(n >= lo && n <= hi, path, () => `${n} is outside ${lo}..=${hi}`);
    return n;
  }

  /** A finite number, or an error and NaN. */
  num(form: SpecForm, path: SpecInput): number {
    const text = form[path].trim();
    const n = text === '' ? Number.NaN : Number(text);
    if (!Number.isFinite(n)) {
      this.add(path, text ? `${JSON.stringify(text)} is not a number` : 'required');
      return Number.NaN;
    }
    return n;
  }
}

export interface Checked {
  spec: JobSpec | null;
  errors: FormErrors;
}

/** Checks the form as the server would and builds the spec when nothing is wrong. */
export function checkSpecForm(form: SpecForm, now: Date, tokens: readonly StakeToken[] = []): Checked {
  const c = new Collector();
  const kind = form.kind as JobKind;
  c.check(kind === 'lora' || kind === 'federated', 'kind', () => 'choose lora or federated');

  const cid = form['base_model.cid'].trim();
  c.check(CID.test(cid), 'base_model.cid', () =>
    cid ? `${JSON.stringify(cid)} is not a CID (Qm… or b…)` : 'required: the CID of the base model in the content store',
  );
  const format = form['base_model.format'] as ModelFormat;
  c.check(format === 'safetensors' || format === 'gguf', 'base_model.format', () => 'choose safetensors or gguf');
  const architecture = form['base_model.architecture'] as Architecture;
  const task = form['base_model.task'] as TrainingTask;
  const pairOk =
    (architecture === 'llama' && task === 'causal_lm') || (architecture === 'bert' && task === 'sequence_classification');
  c.check(pairOk, 'base_model.task', () => `${architecture} models are not trained for ${task}`);
  let numLabels: number | undefined;
  if (task === 'sequence_classification') {
    numLabels = c.int(form, 'base_model.num_labels', MIN_NUM_LABELS, MAX_NUM_LABELS);
  } else if (form['base_model.num_labels'].trim() !== '') {
    c.add('base_model.num_labels', 'num_labels applies to classification only');
  }

  const adapter = form['base_model.adapter'].trim();
  c.check(adapter === '' || CID.test(adapter), 'base_model.adapter', () => `${JSON.stringify(adapter)} is not a CID (Qm… or b…)`);

  const r = c.int(form, 'lora.r', loraLimits.r.minimum, MAX_LORA_RANK);
  const alpha = c.num(form, 'lora.alpha');
  const alphaAbove = loraLimits.alpha.exclusiveMinimum;
  c.check(
    Number.isNaN(alpha) || (alpha > alphaAbove && alpha <= MAX_LORA_ALPHA),
    'lora.alpha',
    () => `${alpha} is outside (${alphaAbove}, ${MAX_LORA_ALPHA}]`,
  );
  const dropout = c.num(form, 'lora.dropout');
  const { minimum: dropoutMin, exclusiveMaximum: dropoutBelow } = loraLimits.dropout;
  c.check(
    Number.isNaN(dropout) || (dropout >= dropoutMin && dropout < dropoutBelow),
    'lora.dropout',
    () => `${dropout} is outside [${dropoutMin}, ${dropoutBelow})`,
  );
  const targets = moduleList(form['lora.target_modules']);
  const toSave = moduleList(form['lora.modules_to_save']);
  c.check(targets.length > 0, 'lora.target_modules', () => 'name at least one module to adapt (e.g. q_proj, v_proj)');
  for (const [path, names] of [
    ['lora.target_modules', targets],
    ['lora.modules_to_save', toSave],
  ] as const) {
    names.forEach((name, i) => {
      c.check(MODULE_NAME.test(name), path, () => `${JSON.stringify(name)} is not a module name (letters, digits, '_' and '.')`);
      c.check(names.indexOf(name) === i, path, () => `${JSON.stringify(name)} is listed twice`);
    });
  }

  const epochs = c.int(form, 'training.epochs', trainingLimits.epochs.minimum, MAX_EPOCHS);
  const lr = c.num(form, 'training.learning_rate');
  const lrAbove = trainingLimits.learning_rate.exclusiveMinimum;
  c.check(
    Number.isNaN(lr) || (lr > lrAbove && lr <= MAX_LEARNING_RATE),
    'training.learning_rate',
    () => `${lr} is outside (${lrAbove}, ${MAX_LEARNING_RATE}]`,
  );
  const batch = c.int(form, 'training.batch_size', trainingLimits.batch_size.minimum, MAX_BATCH_SIZE);
  const seqLen = c.int(form, 'training.max_seq_len', MIN_SEQ_LEN, MAX_SEQ_LEN);
  // The spec sets no maximum (a u64); above this a JavaScript number would round the seed.
  const seed = c.int(form, 'training.seed', trainingLimits.seed.minimum, Number.MAX_SAFE_INTEGER);
  const schedule = form['training.schedule'] as LrSchedule;
  c.check(schedule === 'task' || schedule === 'job', 'training.schedule', () => 'choose task or job');
  // Empty: supervised training; a beta: preference fine-tuning (DPO) of a causal LM.
  let dpo: { beta: number } | undefined;
  if (form['training.dpo.beta'].trim() !== '') {
    const beta = c.num(form, 'training.dpo.beta');
    const { exclusiveMinimum: betaAbove, maximum: betaMax } = dpoLimits.beta;
    c.check(
      Number.isNaN(beta) || (beta > betaAbove && beta <= betaMax),
      'training.dpo.beta',
      () => `${beta} is outside (${betaAbove}, ${betaMax}]`,
    );
    c.check(task === 'causal_lm', 'training.dpo.beta', () => 'preference training needs a causal LM (llama)');
    dpo = { beta };
  }

  const shards = c.int(form, 'shards', jobLimits.shards.minimum, MAX_SHARDS);
  const rounds = c.int(form, 'rounds', jobLimits.rounds.minimum, MAX_ROUNDS);
  if (kind === 'lora') {
    c.check(Number.isNaN(shards) || shards === 1, 'shards', () => `a lora job has exactly 1 shard, not ${shards}; use kind federated to split`);
    c.check(Number.isNaN(rounds) || rounds === 1, 'rounds', () => `a lora job has exactly 1 round, not ${rounds}`);
  }
  const heldOut = c.num(form, 'held_out_fraction');
  const heldOutAbove = jobLimits.held_out_fraction.exclusiveMinimum;
  c.check(
    Number.isNaN(heldOut) || (heldOut > heldOutAbove && heldOut <= MAX_HELD_OUT_FRACTION),
    'held_out_fraction',
    () => `${heldOut} is outside (${heldOutAbove}, ${MAX_HELD_OUT_FRACTION}]: the validator needs held-out data`,
  );
  const minReputation = c.int(form, 'min_reputation', jobLimits.min_reputation.minimum, MAX_REPUTATION_BPS);

  const deadlineText = form.deadline.trim();
  const deadline = deadlineText ? new Date(deadlineText) : new Date(Number.NaN);
  if (Number.isNaN(deadline.getTime())) {
    c.add('deadline', deadlineText ? `${JSON.stringify(deadlineText)} is not a date and time` : 'required');
  } else {
    c.check(deadline.getTime() > now.getTime(), 'deadline', () => `${deadline.toISOString()} is not in the future`);
    c.check(
      deadline.getTime() <= now.getTime() + MAX_DEADLINE_DAYS * 86_400_000,
      'deadline',
      () => `${deadline.toISOString()} is more than ${MAX_DEADLINE_DAYS} days away`,
    );
  }

  // The stake is typed in whole units of its asset (ETH, or the token's decimals) and sent in
  // the smallest unit. Only a token the escrow lists may be chosen: any other would be refused
  // at funding, after the upload.
  let stakeUnits = 0n;
  const tokenText = form['stake.token'].trim();
  const listed = tokens.some((t) => t.address.toLowerCase() === tokenText.toLowerCase());
  c.check(tokenText === '' || listed, 'stake.token', () => `${tokenText} is not a token the escrow accepts`);
  const asset = assetOf(tokenText, tokens);
  const stakeText = form['stake.amount'].trim();
  const pattern = asset.decimals > 0 ? new RegExp(`^\\d+(\\.\\d{1,${asset.decimals}})?$`) : /^\d+$/;
  if (!pattern.test(stakeText)) {
    c.add(
      'stake.amount',
      stakeText ? `${JSON.stringify(stakeText)} is not an amount of ${asset.symbol} (up to ${asset.decimals} decimals)` : 'required',
    );
  } else {
    stakeUnits = parseUnits(stakeText, asset.decimals);
    c.check(stakeUnits > 0n, 'stake.amount', () => 'a job needs a stake above 0 to pay its contributors');
  }

  if (Object.keys(c.errors).length > 0) return { spec: null, errors: c.errors };
  const spec: JobSpec = {
    version: PROTOCOL_VERSION,
    kind,
    base_model: {
      cid,
      format,
      architecture,
      task,
      ...(numLabels === undefined ? {} : { num_labels: numLabels }),
      ...(adapter === '' ? {} : { adapter }),
    },
    lora: { r, alpha, dropout, target_modules: targets, modules_to_save: toSave },
    // The server's defaults, sent explicitly so the posted spec reads complete.
    training: {
      epochs,
      learning_rate: lr,
      batch_size: batch,
      max_seq_len: seqLen,
      seed,
      warmup_ratio: DEFAULT_WARMUP_RATIO,
      gradient_accumulation: DEFAULT_GRADIENT_ACCUMULATION,
      schedule,
      ...(dpo === undefined ? {} : { dpo }),
    },
    shards,
    rounds,
    held_out_fraction: heldOut,
    min_reputation: minReputation,
    // Whole seconds: the chain stores the deadline as a uint64 of seconds.
    deadline: new Date(Math.floor(deadline.getTime() / 1000) * 1000).toISOString().replace('.000Z', 'Z'),
    stake: { amount: stakeUnits.toString(), ...(asset.isEth ? {} : { token: asset.address }) },
  };
  return { spec, errors: {} };
}

/** Records in a JSONL dataset as the server counts them: non-blank lines. */
export function countRecords(text: string): number {
  let n = 0;
  for (const line of text.split('\n')) if (line.trim() !== '') n += 1;
  return n;
}
