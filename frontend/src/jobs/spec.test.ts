import { describe, expect, it } from 'vitest';
import { checkSpecForm, countRecords, defaultForm, moduleList, type SpecForm } from './spec';

const now = new Date('2026-11-22T00:00:00Z');
const CID = 'bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku';

function form(overrides: Partial<SpecForm> = {}): SpecForm {
  return { ...defaultForm(now), 'base_model.cid': CID, deadline: '2026-12-01T00:00', ...overrides };
}

describe('checkSpecForm', () => {
  it('builds the spec the server takes from valid input', () => {
    const { spec, errors } = checkSpecForm(form(), now);
    expect(errors).toEqual({});
    expect(spec).toMatchObject({
      version: 1,
      kind: 'federated',
      base_model: { cid: CID, architecture: 'bert', task: 'sequence_classification', num_labels: 2 },
      lora: { r: 8, alpha: 16, target_modules: ['query', 'value'], modules_to_save: ['classifier'] },
      training: { epochs: 1, learning_rate: 0.0005, batch_size: 16, seed: 7, schedule: 'task' },
      shards: 3,
      rounds: 2,
      stake: { amount: '100000000000000000' },
    });
    expect(spec?.deadline).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$/);
  });

  it('reports every problem at once, each on its input, in the server words', () => {
    const { spec, errors } = checkSpecForm(
      form({
        'lora.r': '0',
        'lora.dropout': '1',
        'training.learning_rate': '0',
        shards: '0',
        held_out_fraction: '0.9',
        deadline: '2020-01-01T00:00',
        'stake.amount': '0',
      }),
      now,
    );
    expect(spec).toBeNull();
    expect(Object.keys(errors)).toEqual([
      'lora.r',
      'lora.dropout',
      'training.learning_rate',
      'shards',
      'held_out_fraction',
      'deadline',
      'stake.amount',
    ]);
    expect(errors['lora.r']).toEqual(['0 is outside 1..=256']);
    expect(errors.shards).toEqual(['0 is outside 1..=1024']);
  });

  it('sends the learning-rate schedule chosen and refuses any other', () => {
    expect(checkSpecForm(form({ 'training.schedule': 'job' }), now).spec?.training.schedule).toBe('job');
    const { spec, errors } = checkSpecForm(form({ 'training.schedule': 'round' }), now);
    expect(spec).toBeNull();
    expect(errors['training.schedule']).toEqual(['choose task or job']);
  });

  it('makes a causal-LM job preference training when a DPO beta is given, and only then', () => {
    const llama = {
      'base_model.architecture': 'llama',
      'base_model.task': 'causal_lm',
      'base_model.num_labels': '',
      'lora.modules_to_save': '',
    };
    expect(checkSpecForm(form(llama), now).spec?.training.dpo).toBeUndefined();
    expect(checkSpecForm(form({ ...llama, 'training.dpo.beta': '0.1' }), now).spec?.training.dpo).toEqual({ beta: 0.1 });
    expect(checkSpecForm(form({ ...llama, 'training.dpo.beta': '0' }), now).errors['training.dpo.beta']).toEqual([
      '0 is outside (0, 5]',
    ]);
    expect(checkSpecForm(form({ 'training.dpo.beta': '0.1' }), now).errors['training.dpo.beta']).toEqual([
      'preference training needs a causal LM (llama)',
    ]);
  });

  it('takes rank bounds inclusively', () => {
    for (const [r, ok] of [
      ['1', true],
      ['256', true],
      ['257', false],
      ['8.5', false],
      ['', false],
    ] as const) {
      expect(checkSpecForm(form({ 'lora.r': r }), now).spec !== null, `r = ${r}`).toBe(ok);
    }
  });

  it('keeps a lora job to one shard and one round', () => {
    const { errors } = checkSpecForm(form({ kind: 'lora' }), now);
    expect(Object.keys(errors)).toEqual(['shards', 'rounds']);
    expect(checkSpecForm(form({ kind: 'lora', shards: '1', rounds: '1' }), now).spec?.kind).toBe('lora');
  });

  it('checks module names one by one and catches duplicates', () => {
    const { errors } = checkSpecForm(form({ 'lora.target_modules': 'query, val-ue, query' }), now);
    expect(errors['lora.target_modules']).toEqual([
      '"val-ue" is not a module name (letters, digits, \'_\' and \'.\')',
      '"query" is listed twice',
    ]);
    expect(checkSpecForm(form({ 'lora.target_modules': ' ' }), now).errors['lora.target_modules']).toEqual([
      'name at least one module to adapt (e.g. q_proj, v_proj)',
    ]);
  });

  it('requires the model and the task to fit, and labels only for classification', () => {
    expect(checkSpecForm(form({ 'base_model.architecture': 'llama' }), now).errors['base_model.task']).toEqual([
      'llama models are not trained for sequence_classification',
    ]);
    const llama = checkSpecForm(
      form({
        'base_model.architecture': 'llama',
        'base_model.task': 'causal_lm',
        'base_model.num_labels': '2',
        'lora.modules_to_save': '',
      }),
      now,
    );
    expect(llama.errors['base_model.num_labels']).toEqual(['num_labels applies to classification only']);
    const ok = checkSpecForm(
      form({ 'base_model.architecture': 'llama', 'base_model.task': 'causal_lm', 'base_model.num_labels': '', 'lora.modules_to_save': '' }),
      now,
    );
    expect(ok.spec?.base_model).not.toHaveProperty('num_labels');
    expect(ok.spec?.lora.modules_to_save).toEqual([]);
  });

  it('bounds the deadline to the future and one year', () => {
    expect(checkSpecForm(form({ deadline: '2028-01-01T00:00' }), now).errors.deadline?.[0]).toMatch(/more than 365 days away$/);
    expect(checkSpecForm(form({ deadline: '' }), now).errors.deadline).toEqual(['required']);
  });

  it('reads the stake in ETH and sends wei, refusing more than 18 decimals', () => {
    expect(checkSpecForm(form({ 'stake.amount': '1.5' }), now).spec?.stake.amount).toBe('1500000000000000000');
    expect(checkSpecForm(form({ 'stake.amount': '0.0000000000000000001' }), now).errors['stake.amount']?.[0]).toMatch(
      /not an amount of ETH/,
    );
    expect(checkSpecForm(form({ 'stake.amount': '-1' }), now).errors['stake.amount']).toBeDefined();
  });

  it('reads a token stake in the token\'s decimals and sends its smallest unit with the token', () => {
    const tUSD = { address: '0x1111111111111111111111111111111111111111', symbol: 'tUSD', decimals: 6 };
    const staked = checkSpecForm(form({ 'stake.token': tUSD.address, 'stake.amount': '250.5' }), now, [tUSD]);
    expect(staked.spec?.stake).toEqual({ amount: '250500000', token: tUSD.address });
    expect(checkSpecForm(form({ 'stake.token': tUSD.address, 'stake.amount': '0.0000001' }), now, [tUSD]).errors['stake.amount']).toEqual([
      '"0.0000001" is not an amount of tUSD (up to 6 decimals)',
    ]);
    // A token the escrow does not list is refused before anything is uploaded.
    const other = '0x2222222222222222222222222222222222222222';
    expect(checkSpecForm(form({ 'stake.token': other }), now, [tUSD]).errors['stake.token']).toEqual([
      `${other} is not a token the escrow accepts`,
    ]);
    expect(checkSpecForm(form(), now, [tUSD]).spec?.stake).toEqual({ amount: '100000000000000000' });
  });

  it('refuses a CID that is not one', () => {
    expect(checkSpecForm(form({ 'base_model.cid': 'not-a-cid' }), now).errors['base_model.cid']?.[0]).toMatch(/is not a CID/);
    expect(checkSpecForm(form({ 'base_model.cid': 'QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG' }), now).spec).not.toBeNull();
  });

  it('sends the adapter a job continues from only when one is named', () => {
    expect(checkSpecForm(form(), now).spec?.base_model).not.toHaveProperty('adapter');
    expect(checkSpecForm(form({ 'base_model.adapter': ` ${CID} ` }), now).spec?.base_model.adapter).toBe(CID);
    expect(checkSpecForm(form({ 'base_model.adapter': 'job-7' }), now).errors['base_model.adapter']?.[0]).toMatch(/is not a CID/);
  });
});

describe('helpers', () => {
  it('splits module lists on commas and spaces', () => {
    expect(moduleList(' q_proj,v_proj  k_proj ,')).toEqual(['q_proj', 'v_proj', 'k_proj']);
  });

  it('counts non-blank lines as records, like the server', () => {
    expect(countRecords('{"a":1}\n\n  \n{"a":2}\r\n{"a":3}')).toBe(3);
    expect(countRecords('')).toBe(0);
  });
});
