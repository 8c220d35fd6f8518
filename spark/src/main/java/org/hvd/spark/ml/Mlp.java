package org.hvd.spark.ml;

import java.io.Serializable;
import java.util.Random;

/**
 * A one-hidden-layer perceptron with tanh units and a softmax output, or
 * softmax (multinomial logistic) regression when hidden = 0. Parameters are
 * flat double arrays: {W1 (hidden x d), b1, W2 (k x hidden), b2}, or {W (k x d),
 * b} without a hidden layer.
 */
final class Mlp implements Serializable {
  private static final long serialVersionUID = 1L;
  final int d, hidden, k;
  final double[][] params;

  Mlp(int d, int hidden, int k, double[][] params) {
    this.d = d;
    this.hidden = hidden;
    this.k = k;
    this.params = params;
  }

  static Mlp zeros(int d, int hidden, int k) {
    double[][] p = hidden > 0
        ? new double[][] {new double[hidden * d], new double[hidden], new double[k * hidden], new double[k]}
        : new double[][] {new double[k * d], new double[k]};
    return new Mlp(d, hidden, k, p);
  }

  /** Glorot-uniform weights, zero biases. */
  static Mlp init(int d, int hidden, int k, long seed) {
    Mlp m = zeros(d, hidden, k);
    Random rnd = new Random(seed);
    int in = d;
    for (int layer = 0; layer < m.params.length; layer += 2) {
      int out = m.params[layer].length / in;
      double a = Math.sqrt(6.0 / (in + out));
      for (int i = 0; i < m.params[layer].length; ++i) m.params[layer][i] = (2 * rnd.nextDouble() - 1) * a;
      in = out;
    }
    return m;
  }

  /** The output layer's values before the softmax (length k); hid receives the hidden activations. */
  double[] logits(double[] x, double[] hid) {
    double[] in = x;
    int inDim = d;
    int layer = 0;
    if (hidden > 0) {
      double[] w = params[0], b = params[1];
      for (int j = 0; j < hidden; ++j) {
        double s = b[j];
        for (int i = 0; i < d; ++i) s += w[j * d + i] * x[i];
        hid[j] = Math.tanh(s);
      }
      in = hid;
      inDim = hidden;
      layer = 2;
    }
    double[] w = params[layer], b = params[layer + 1];
    double[] z = new double[k];
    for (int c = 0; c < k; ++c) {
      double s = b[c];
      for (int i = 0; i < inDim; ++i) s += w[c * inDim + i] * in[i];
      z[c] = s;
    }
    return z;
  }

  /** Softmax of logits, in place; returns it. */
  static double[] softmax(double[] z) {
    double max = Double.NEGATIVE_INFINITY;
    for (double v : z) max = Math.max(max, v);
    double sum = 0;
    for (int c = 0; c < z.length; ++c) {
      z[c] = Math.exp(z[c] - max);
      sum += z[c];
    }
    for (int c = 0; c < z.length; ++c) z[c] /= sum;
    return z;
  }

  /** Class probabilities for x (length d); hid receives the hidden activations. */
  private double[] forward(double[] x, double[] hid) {
    return softmax(logits(x, hid));
  }

  /** Index of the largest value (the first of equal ones). */
  static int argmax(double[] v) {
    int best = 0;
    for (int c = 1; c < v.length; ++c) if (v[c] > v[best]) best = c;
    return best;
  }

  int predict(double[] x) {
    return argmax(forward(x, new double[hidden]));
  }

  /**
   * Adds the gradient of the summed cross-entropy of one example to grads
   * (shaped like params) and returns its loss.
   */
  double accumulate(double[] x, int y, double[][] grads) {
    double[] hid = new double[hidden];
    double[] p = forward(x, hid);
    double loss = -Math.log(Math.max(p[y], 1e-300));
    double[] dz = p.clone();
    dz[y] -= 1;
    double[] in = hidden > 0 ? hid : x;
    int inDim = hidden > 0 ? hidden : d;
    int layer = hidden > 0 ? 2 : 0;
    double[] gw = grads[layer], gb = grads[layer + 1], w = params[layer];
    for (int c = 0; c < k; ++c) {
      gb[c] += dz[c];
      for (int i = 0; i < inDim; ++i) gw[c * inDim + i] += dz[c] * in[i];
    }
    if (hidden > 0) {
      double[] g1 = grads[0], gb1 = grads[1];
      for (int j = 0; j < hidden; ++j) {
        double back = 0;
        for (int c = 0; c < k; ++c) back += dz[c] * w[c * hidden + j];
        double dh = back * (1 - hid[j] * hid[j]);
        gb1[j] += dh;
        for (int i = 0; i < d; ++i) g1[j * d + i] += dh * x[i];
      }
    }
    return loss;
  }
}
