package org.hvd.spark.ml;

import org.apache.spark.ml.param.DoubleParam;
import org.apache.spark.ml.param.IntParam;
import org.apache.spark.ml.param.LongParam;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamValidators;
import org.apache.spark.ml.util.Identifiable;

/** The params shared by the estimator and its model, owned by one of them. */
final class MlpParams {
  final Param<String> featuresCol, labelCol, predictionCol, rawPredictionCol, probabilityCol;
  final IntParam numProc, epochs, batchSize, hiddenSize;
  final DoubleParam learningRate;
  final LongParam seed;

  MlpParams(Identifiable owner) {
    featuresCol = new Param<>(owner, "featuresCol", "features column name (a Vector)");
    labelCol = new Param<>(owner, "labelCol", "label column name (class index 0, 1, ...)");
    predictionCol = new Param<>(owner, "predictionCol", "prediction column name");
    rawPredictionCol = new Param<>(owner, "rawPredictionCol",
        "raw prediction (the output layer before the softmax, a Vector) column name; empty: none");
    probabilityCol = new Param<>(owner, "probabilityCol",
        "class probabilities (softmax, a Vector) column name; empty: none");
    numProc = new IntParam(owner, "numProc", "number of barrier tasks (hvd ranks) to train on",
        ParamValidators.gtEq(1));
    epochs = new IntParam(owner, "epochs", "passes over the data", ParamValidators.gtEq(1));
    batchSize = new IntParam(owner, "batchSize", "minibatch rows per rank and step",
        ParamValidators.gtEq(1));
    hiddenSize = new IntParam(owner, "hiddenSize",
        "tanh units in the hidden layer (0: softmax regression)", ParamValidators.gtEq(0));
    learningRate = new DoubleParam(owner, "learningRate", "SGD step size", ParamValidators.gt(0));
    seed = new LongParam(owner, "seed", "random seed (weights, shuffling)");
  }
}
