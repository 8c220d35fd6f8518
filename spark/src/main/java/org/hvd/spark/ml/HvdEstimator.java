package org.hvd.spark.ml;

import java.io.Serializable;
import java.util.List;
import org.apache.spark.ml.Estimator;
import org.apache.spark.ml.param.IntParam;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.param.ParamValidators;
import org.apache.spark.ml.util.Identifiable;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;
import org.hvd.HvdConfig;
import org.hvd.spark.HvdSpark;
import org.hvd.spark.TrainFunction;

/**
 * A Spark ML estimator around the user's own training function: {@code fit}
 * repartitions the data into {@code numProc} partitions and runs the function
 * on each as one hvd rank ({@link HvdSpark#run}); rank 0's result becomes the
 * model's state, and the user's predictor scores the features column with it.
 *
 * <pre>{@code
 * HvdModel<double[]> model = new HvdEstimator<double[]>()
 *     .setTrainer((ctx, rows) -> trainLinearModel(ctx.hvd(), rows))   // Iterator<Row> of this rank's partition
 *     .setPredictor((w, features) -> dot(w, features))                 // (state, Vector) -> double
 *     .setNumProc(2)
 *     .fit(train);                     // any columns the trainer reads; "features" (Vector) for transform
 * Dataset<Row> scored = model.transform(test);   // adds "prediction"
 * }</pre>
 *
 * The trainer must leave every rank with the same state (data-parallel training
 * does: the same start, the same averaged updates); the model keeps rank 0's.
 * Not {@code MLWritable}: the state and the predictor are the user's objects
 * (Java-serializable, as Spark ships them); save {@link HvdModel#state()} as
 * the application sees fit.
 */
public final class HvdEstimator<S extends Serializable> extends Estimator<HvdModel<S>> {
  private static final long serialVersionUID = 1L;
  private final String uid;
  private final Param<String> featuresCol, predictionCol;
  private final IntParam numProc;
  private TrainFunction<Row, S> trainer;
  private HvdModel.Predictor<S> predictor;
  private HvdConfig hvdConfig = HvdConfig.fromEnvironment();

  public HvdEstimator() {
    this(Identifiable.randomUID("hvdEstimator"));
  }

  public HvdEstimator(String uid) {
    this.uid = uid;
    featuresCol = new Param<>(this, "featuresCol", "features column name (a Vector), for transform");
    predictionCol = new Param<>(this, "predictionCol", "prediction column name");
    numProc = new IntParam(this, "numProc", "number of barrier tasks (hvd ranks) to train on",
        ParamValidators.gtEq(1));
    setDefault(featuresCol, "features");
    setDefault(predictionCol, "prediction");
    setDefault(numProc, 2);
  }

  @Override
  public String uid() {
    return uid;
  }

  public Param<String> featuresCol() { return featuresCol; }
  public Param<String> predictionCol() { return predictionCol; }
  public IntParam numProc() { return numProc; }
  public HvdEstimator<S> setFeaturesCol(String v) { set(featuresCol, v); return this; }
  public HvdEstimator<S> setPredictionCol(String v) { set(predictionCol, v); return this; }
  public HvdEstimator<S> setNumProc(int v) { set(numProc, v); return this; }
  public String getFeaturesCol() { return getOrDefault(featuresCol); }
  public String getPredictionCol() { return getOrDefault(predictionCol); }
  public int getNumProc() { return (Integer) getOrDefault(numProc); }

  /** Runs on every rank with its partition's rows; returns the trained state. */
  public HvdEstimator<S> setTrainer(TrainFunction<Row, S> trainer) {
    this.trainer = trainer;
    return this;
  }

  /** Scores one features Vector with the trained state (in the model's transform). */
  public HvdEstimator<S> setPredictor(HvdModel.Predictor<S> predictor) {
    this.predictor = predictor;
    return this;
  }

  /** hvd settings for the training job (not a Spark Param). */
  public HvdEstimator<S> setHvdConfig(HvdConfig config) {
    this.hvdConfig = config == null ? HvdConfig.fromEnvironment() : config;
    return this;
  }

  @Override
  public HvdModel<S> fit(Dataset<?> dataset) {
    if (trainer == null) throw new IllegalStateException("HvdEstimator: setTrainer(...) first");
    if (predictor == null) throw new IllegalStateException("HvdEstimator: setPredictor(...) first");
    @SuppressWarnings("unchecked")
    Dataset<Row> rows = (Dataset<Row>) dataset.toDF();
    List<S> states = HvdSpark.run(rows.toJavaRDD().repartition(getNumProc()), trainer, hvdConfig);
    HvdModel<S> model = new HvdModel<>(uid, states.get(0), predictor);
    copyValues(model, ParamMap.empty());
    model.setParent(this);
    return model;
  }

  @Override
  public StructType transformSchema(StructType schema) {
    return HvdModel.outputSchema(schema, getFeaturesCol(), getPredictionCol());
  }

  @Override
  public HvdEstimator<S> copy(ParamMap extra) {
    HvdEstimator<S> c = new HvdEstimator<>(uid);
    copyValues(c, extra);
    c.trainer = trainer;
    c.predictor = predictor;
    c.hvdConfig = hvdConfig;
    return c;
  }
}
