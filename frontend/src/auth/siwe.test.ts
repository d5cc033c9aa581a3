import { describe, expect, it } from 'vitest';
import { domainMismatch, signInMessage, SIGN_IN_STATEMENT } from './siwe';

describe('signInMessage', () => {
  it('lays the message out line by line as the server parser reads it', () => {
    const text = signInMessage({
      domain: 'localhost:8080',
      origin: 'http://localhost:8080',
      // Lower case in, EIP-55 out: the server refuses an address without its checksum.
      address: '0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266',
      chainId: 31337,
      nonce: 'abcdefgh1234',
      issuedAt: new Date('2026-11-22T03:00:00Z'),
      expiresAt: new Date('2026-11-22T03:05:00Z'),
    });
    expect(text.split('\n')).toEqual([
      'localhost:8080 wants you to sign in with your Ethereum account:',
      '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
      '',
      SIGN_IN_STATEMENT,
      '',
      'URI: http://localhost:8080',
      'Version: 1',
      'Chain ID: 31337',
      'Nonce: abcdefgh1234',
      'Issued At: 2026-11-22T03:00:00.000Z',
      'Expiration Time: 2026-11-22T03:05:00.000Z',
    ]);
  });

  it('refuses a nonce the server would not have issued', () => {
    expect(() =>
      signInMessage({
        domain: 'localhost:8080',
        origin: 'http://localhost:8080',
        address: '0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266',
        chainId: 1,
        nonce: 'short',
        issuedAt: new Date(),
        expiresAt: new Date(),
      }),
    ).toThrow(/nonce/i);
  });
});

describe('domainMismatch', () => {
  it('accepts the page host the server names and explains any other', () => {
    expect(domainMismatch('localhost:8080', 'localhost:8080')).toBeNull();
    expect(domainMismatch('localhost:8080', '127.0.0.1:8080')).toMatch(/http:\/\/localhost:8080\//);
  });
});
