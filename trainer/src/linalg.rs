//! Small dense linear algebra in f64 for adapter merging: thin QR by Gram–Schmidt with
//! re-orthogonalisation, SVD by one-sided Jacobi, randomized SVD for large dense updates.
//! candle has no SVD; the matrices here are at most a few thousand wide and rank ≤ a few
//! dozen, where these simple methods are accurate to round-off and fast enough.

use normal::standard_normal;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Row-major `rows × cols` matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Mat {
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// The entries, row after row (`rows * cols` of them).
    pub data: Vec<f64>,
}

impl Mat {
    /// A `rows × cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Self {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// Wraps row-major `data`, which must hold `rows * cols` entries.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<f64>) -> Self {
        debug_assert_eq!(data.len(), rows * cols);
        Self { rows, cols, data }
    }

    /// The `n × n` identity.
    pub fn identity(n: usize) -> Self {
        let mut m = Self::zeros(n, n);
        for i in 0..n {
            m.data[i * n + i] = 1.0;
        }
        m
    }

    /// The entry at row `r`, column `c`.
    #[inline]
    pub fn at(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.cols + c]
    }

    #[inline]
    fn at_mut(&mut self, r: usize, c: usize) -> &mut f64 {
        &mut self.data[r * self.cols + c]
    }

    /// The transpose.
    pub fn t(&self) -> Mat {
        let mut out = Mat::zeros(self.cols, self.rows);
        for r in 0..self.rows {
            for c in 0..self.cols {
                out.data[c * self.rows + r] = self.data[r * self.cols + c];
            }
        }
        out
    }

    /// The product `self · rhs`; panics when the inner dimensions differ.
    pub fn matmul(&self, rhs: &Mat) -> Mat {
        assert_eq!(self.cols, rhs.rows, "matmul inner dimensions");
        let mut out = Mat::zeros(self.rows, rhs.cols);
        for i in 0..self.rows {
            let row = &mut out.data[i * rhs.cols..(i + 1) * rhs.cols];
            for k in 0..self.cols {
                let a = self.data[i * self.cols + k];
                if a == 0.0 {
                    continue;
                }
                let rrow = &rhs.data[k * rhs.cols..(k + 1) * rhs.cols];
                for (o, b) in row.iter_mut().zip(rrow) {
                    *o += a * b;
                }
            }
        }
        out
    }

    /// Every entry multiplied by `s`.
    pub fn scale(&self, s: f64) -> Mat {
        Mat::from_vec(
            self.rows,
            self.cols,
            self.data.iter().map(|x| x * s).collect(),
        )
    }

    /// `self += s · other`, entry by entry.
    pub fn add_assign_scaled(&mut self, other: &Mat, s: f64) {
        for (a, b) in self.data.iter_mut().zip(&other.data) {
            *a += s * b;
        }
    }

    /// The Frobenius norm: square root of the sum of squared entries.
    pub fn frobenius(&self) -> f64 {
        self.data.iter().map(|x| x * x).sum::<f64>().sqrt()
    }

    fn col(&self, c: usize) -> Vec<f64> {
        (0..self.rows).map(|r| self.at(r, c)).collect()
    }

    /// Columns side by side.
    pub fn from_cols(rows: usize, cols: &[Vec<f64>]) -> Mat {
        let mut m = Mat::zeros(rows, cols.len());
        for (c, col) in cols.iter().enumerate() {
            for (r, v) in col.iter().enumerate() {
                *m.at_mut(r, c) = *v;
            }
        }
        m
    }

    /// `[self | other]`.
    pub fn hcat(&self, other: &Mat) -> Mat {
        assert_eq!(self.rows, other.rows);
        let mut out = Mat::zeros(self.rows, self.cols + other.cols);
        for r in 0..self.rows {
            out.data[r * out.cols..r * out.cols + self.cols]
                .copy_from_slice(&self.data[r * self.cols..(r + 1) * self.cols]);
            out.data[r * out.cols + self.cols..(r + 1) * out.cols]
                .copy_from_slice(&other.data[r * other.cols..(r + 1) * other.cols]);
        }
        out
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Thin QR of `x (m × q)`: `Q (m × k)` with orthonormal columns and `R (k × q)` with
/// `Q·R = x`, where `k ≤ q` is the numerical rank (columns that add nothing new are dropped,
/// so a zero or rank-deficient input is fine).
pub fn qr(x: &Mat) -> (Mat, Mat) {
    let m = x.rows;
    let mut qs: Vec<Vec<f64>> = Vec::new();
    let mut r_cols: Vec<Vec<(usize, f64)>> = Vec::with_capacity(x.cols);
    let scale = x.frobenius().max(f64::MIN_POSITIVE);
    for j in 0..x.cols {
        let mut v = x.col(j);
        let mut coeffs = vec![0.0; qs.len()];
        // Two passes of Gram–Schmidt: "twice is enough" for orthogonality to round-off.
        for _ in 0..2 {
            for (i, q) in qs.iter().enumerate() {
                let c = dot(q, &v);
                coeffs[i] += c;
                for (vv, qq) in v.iter_mut().zip(q) {
                    *vv -= c * qq;
                }
            }
        }
        let norm = dot(&v, &v).sqrt();
        let mut col: Vec<(usize, f64)> = coeffs.into_iter().enumerate().collect();
        if norm > 1e-12 * scale && qs.len() < m {
            for vv in &mut v {
                *vv /= norm;
            }
            col.push((qs.len(), norm));
            qs.push(v);
        }
        r_cols.push(col);
    }
    let k = qs.len();
    let q = Mat::from_cols(m, &qs);
    let mut r = Mat::zeros(k, x.cols);
    for (j, col) in r_cols.into_iter().enumerate() {
        for (i, v) in col {
            *r.at_mut(i, j) = v;
        }
    }
    (q, r)
}

/// Thin SVD: `x = U·diag(s)·Vᵀ` with singular values in decreasing order.
pub struct Svd {
    /// Left singular vectors as columns (`m × k`).
    pub u: Mat,
    /// Singular values, largest first.
    pub s: Vec<f64>,
    /// Right singular vectors as columns (`n × k`).
    pub v: Mat,
}

/// SVD by one-sided Jacobi (Hestenes), accurate to round-off; O(sweeps · min(m,n)² · max(m,n)).
pub fn svd(x: &Mat) -> Svd {
    if x.rows < x.cols {
        let t = svd(&x.t());
        return Svd {
            u: t.v,
            s: t.s,
            v: t.u,
        };
    }
    let (m, n) = (x.rows, x.cols);
    let mut cols: Vec<Vec<f64>> = (0..n).map(|c| x.col(c)).collect();
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|c| (0..n).map(|r| if r == c { 1.0 } else { 0.0 }).collect())
        .collect();
    for _sweep in 0..60 {
        let mut rotated = false;
        for i in 0..n {
            for j in i + 1..n {
                let alpha = dot(&cols[i], &cols[i]);
                let beta = dot(&cols[j], &cols[j]);
                let gamma = dot(&cols[i], &cols[j]);
                if gamma.abs() <= 1e-15 * (alpha * beta).sqrt() || gamma == 0.0 {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = c * t;
                rotate(&mut cols, i, j, c, s);
                rotate(&mut v, i, j, c, s);
            }
        }
        if !rotated {
            break;
        }
    }
    let mut order: Vec<(f64, usize)> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| (dot(c, c).sqrt(), i))
        .collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut u_cols = Vec::with_capacity(n);
    let mut v_cols = Vec::with_capacity(n);
    let mut s = Vec::with_capacity(n);
    for (sigma, i) in order {
        let u: Vec<f64> = if sigma > 0.0 {
            cols[i].iter().map(|x| x / sigma).collect()
        } else {
            vec![0.0; m]
        };
        u_cols.push(u);
        v_cols.push(v[i].clone());
        s.push(sigma);
    }
    Svd {
        u: Mat::from_cols(m, &u_cols),
        s,
        v: Mat::from_cols(n, &v_cols),
    }
}

fn rotate(cols: &mut [Vec<f64>], i: usize, j: usize, c: f64, s: f64) {
    let (left, right) = cols.split_at_mut(j);
    let (a, b) = (&mut left[i], &mut right[0]);
    for (x, y) in a.iter_mut().zip(b.iter_mut()) {
        let (xi, yj) = (*x, *y);
        *x = c * xi - s * yj;
        *y = s * xi + c * yj;
    }
}

/// SVD of the product `left (m × q) · right (q × n)` without forming it: QR of both factors,
/// then Jacobi on the small core. Exact up to round-off; the rank is at most `q`.
pub fn svd_of_product(left: &Mat, right: &Mat) -> Svd {
    let (ql, rl) = qr(left);
    let (qr_, rr) = qr(&right.t());
    let core = rl.matmul(&rr.t());
    let small = svd(&core);
    Svd {
        u: ql.matmul(&small.u),
        s: small.s,
        v: qr_.matmul(&small.v),
    }
}

/// Randomized SVD (Halko, Martinsson & Tropp 2011) of a dense `x`, keeping `k` components,
/// with `oversample` extra probe vectors and `power_iters` subspace iterations. Seeded.
pub fn randomized_svd(x: &Mat, k: usize, oversample: usize, power_iters: usize, seed: u64) -> Svd {
    let l = (k + oversample).min(x.rows).min(x.cols);
    let mut rng = StdRng::seed_from_u64(seed);
    let omega = Mat::from_vec(
        x.cols,
        l,
        (0..x.cols * l).map(|_| standard_normal(&mut rng)).collect(),
    );
    let (mut q, _) = qr(&x.matmul(&omega));
    let xt = x.t();
    for _ in 0..power_iters {
        let (z, _) = qr(&xt.matmul(&q));
        q = qr(&x.matmul(&z)).0;
    }
    let small = svd(&q.t().matmul(x));
    Svd {
        u: q.matmul(&small.u),
        s: small.s,
        v: small.v,
    }
}

/// A standard normal sample by Box–Muller, so no extra distribution crate is needed.
mod normal {
    use rand::Rng;

    /// One draw from N(0, 1).
    pub fn standard_normal(rng: &mut impl Rng) -> f64 {
        let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        let u2: f64 = rng.random();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(rows: usize, cols: usize, seed: u64) -> Mat {
        let mut rng = StdRng::seed_from_u64(seed);
        Mat::from_vec(
            rows,
            cols,
            (0..rows * cols)
                .map(|_| standard_normal(&mut rng))
                .collect(),
        )
    }

    fn reconstruct(s: &Svd) -> Mat {
        let mut us = s.u.clone();
        for r in 0..us.rows {
            for c in 0..us.cols {
                us.data[r * us.cols + c] *= s.s[c];
            }
        }
        us.matmul(&s.v.t())
    }

    fn rel_err(a: &Mat, b: &Mat) -> f64 {
        let mut d = a.clone();
        d.add_assign_scaled(b, -1.0);
        d.frobenius() / b.frobenius()
    }

    #[test]
    fn jacobi_svd_reconstructs_and_orders_singular_values() {
        for (m, n) in [(7, 4), (4, 7), (5, 5)] {
            let x = random(m, n, 3);
            let s = svd(&x);
            assert!(rel_err(&reconstruct(&s), &x) < 1e-12);
            assert!(s.s.windows(2).all(|w| w[0] >= w[1]));
            let utu = s.u.t().matmul(&s.u);
            assert!(rel_err(&utu, &Mat::identity(utu.rows)) < 1e-12);
        }
    }

    #[test]
    fn product_svd_handles_rank_deficient_factors() {
        let mut left = random(30, 6, 1);
        // Two identical columns and one zero column: rank 4.
        for r in 0..30 {
            left.data[r * 6 + 5] = left.data[r * 6 + 4];
            left.data[r * 6 + 3] = 0.0;
        }
        let right = random(6, 20, 2);
        let s = svd_of_product(&left, &right);
        assert!(rel_err(&reconstruct(&s), &left.matmul(&right)) < 1e-12);
        assert!(s.s.len() <= 5);
        let zero = svd_of_product(&Mat::zeros(8, 3), &random(3, 5, 4));
        assert!(zero.s.iter().all(|&x| x == 0.0) || zero.s.is_empty());
    }

    #[test]
    fn randomized_svd_recovers_a_low_rank_matrix() {
        let x = random(50, 4, 5).matmul(&random(4, 40, 6));
        let s = randomized_svd(&x, 4, 6, 2, 7);
        assert!(rel_err(&reconstruct(&s), &x) < 1e-10);
    }
}
