import { Layout } from './components/Layout';
import { shortJobId } from './format';
import { Earnings } from './pages/Earnings';
import { Home } from './pages/Home';
import { JobPage } from './pages/JobPage';
import { MyJobs } from './pages/MyJobs';
import { PostJob } from './pages/PostJob';
import { Link, matchRoute, usePath } from './router';

export function App() {
  const path = usePath();
  const route = matchRoute(path);
  switch (route.page) {
    case 'home':
      return (
        <Layout title="Fine-tuning jobs, paid by quality" path={path}>
          <Home />
        </Layout>
      );
    case 'post':
      return (
        <Layout title="Post a job" path={path}>
          <PostJob />
        </Layout>
      );
    case 'jobs':
      return (
        <Layout title="My jobs" path={path}>
          <MyJobs path={path} />
        </Layout>
      );
    case 'job':
      return (
        <Layout title={`Job ${shortJobId(route.id)}`} path={path}>
          <JobPage key={route.id} id={route.id} />
        </Layout>
      );
    case 'earnings':
      return (
        <Layout title="Worker earnings" path={path}>
          <Earnings />
        </Layout>
      );
    case 'not-found':
      return (
        <Layout title="Page not found" path={path}>
          <p>
            Nothing lives at <code>{route.path}</code>. Go to <Link href="/jobs">your jobs</Link> or the{' '}
            <Link href="/">start page</Link>.
          </p>
        </Layout>
      );
  }
}
