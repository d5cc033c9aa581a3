import { describe, expect, it } from 'vitest';
import { matchRoute } from './router';

describe('matchRoute', () => {
  it('maps paths to pages', () => {
    expect(matchRoute('/')).toEqual({ page: 'home' });
    expect(matchRoute('/jobs/')).toEqual({ page: 'jobs' });
    expect(matchRoute('/jobs?status=open')).toEqual({ page: 'jobs' });
    expect(matchRoute('/jobs/new')).toEqual({ page: 'post' });
    expect(matchRoute('/earnings')).toEqual({ page: 'earnings' });
    expect(matchRoute('/jobs/0190F3A2-1111-7abc-8def-0123456789ab')).toEqual({
      page: 'job',
      id: '0190f3a2-1111-7abc-8def-0123456789ab',
    });
    expect(matchRoute('/jobs/42')).toEqual({ page: 'not-found', path: '/jobs/42' });
  });
});
