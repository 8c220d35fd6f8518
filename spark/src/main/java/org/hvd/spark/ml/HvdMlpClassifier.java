package org.hvd.spark.ml;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;
import org.apache.spark.ml.Estimator;
import org.apache.spark.ml.param.DoubleParam;
import org.apache.spark.ml.param.IntParam;
import org.apache.spark.ml.param.LongParam;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.util.Identifiable;
import org.apache.spark.ml.util.MLReader;
import org.apache.spark.ml.util.MLWritable;
import org.apache.spark.ml.util.MLWriter;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.StructType;
import org.hvd.HvdConfig;
import org.hvd.spark.HvdSpark;

/**
 * A Spark ML estimator that trains a small MLP classifier (one tanh hidden
 * layer, softmax output; {@code hiddenSize = 0} gives softmax regression) by
 * data-parallel minibatch SGD on hvd: {@code numProc} Spark barrier tasks, one
 * hvd rank each, with the gradients of every step summed by one fused grouped
 * allreduce.
 *
 * <pre>{@code
 * HvdMlpClassificationModel model = new HvdMlpClassifier()
 *     .setNumProc(2).setEpochs(20).setBatchSize(32).setLearningRate(0.3)
 *     .fit(train);                      // columns "features" (Vector), "label" (0, 1, ...)
 * Dataset<Row> scored = model.transform(test);   // adds "rawPrediction", "probability", "prediction"
 * model.write().overwrite().save(path);
 * }</pre>
 *
 * The cluster needs numProc free task slots at once (barrier mode).
 */
public final class HvdMlpClassifier extends Estimator<HvdMlpClassificationModel> implements MLWritable {
  private static final long serialVersionUID = 1L;
  private final String uid;
  private final MlpParams p;
  private HvdConfig hvdConfig = HvdConfig.fromEnvironment();

  public HvdMlpClassifier() {
    this(Identifiable.randomUID("hvdMlp"));
  }

  public HvdMlpClassifier(String uid) {
    this.uid = uid;
    this.p = new MlpParams(this);
    setDefault(p.featuresCol, "features");
    setDefault(p.labelCol, "label");
    setDefault(p.predictionCol, "prediction");
    setDefault(p.rawPredictionCol, "rawPrediction");
    setDefault(p.probabilityCol, "probability");
    setDefault(p.numProc, 2);
    setDefault(p.epochs, 10);
    setDefault(p.batchSize, 32);
    setDefault(p.hiddenSize, 16);
    setDefault(p.learningRate, 0.1);
    setDefault(p.seed, 42L);
  }

  @Override
  public String uid() {
    return uid;
  }

  // Params (found by Spark through these public accessors).
  public Param<String> featuresCol() { return p.featuresCol; }
  public Param<String> labelCol() { return p.labelCol; }
  public Param<String> predictionCol() { return p.predictionCol; }
  public Param<String> rawPredictionCol() { return p.rawPredictionCol; }
  public Param<String> probabilityCol() { return p.probabilityCol; }
  public IntParam numProc() { return p.numProc; }
  public IntParam epochs() { return p.epochs; }
  public IntParam batchSize() { return p.batchSize; }
  public IntParam hiddenSize() { return p.hiddenSize; }
  public DoubleParam learningRate() { return p.learningRate; }
  public LongParam seed() { return p.seed; }

  public HvdMlpClassifier setFeaturesCol(String v) { set(p.featuresCol, v); return this; }
  public HvdMlpClassifier setLabelCol(String v) { set(p.labelCol, v); return this; }
  public HvdMlpClassifier setPredictionCol(String v) { set(p.predictionCol, v); return this; }
  public HvdMlpClassifier setRawPredictionCol(String v) { set(p.rawPredictionCol, v); return this; }
  public HvdMlpClassifier setProbabilityCol(String v) { set(p.probabilityCol, v); return this; }
  public HvdMlpClassifier setNumProc(int v) { set(p.numProc, v); return this; }
  public HvdMlpClassifier setEpochs(int v) { set(p.epochs, v); return this; }
  public HvdMlpClassifier setBatchSize(int v) { set(p.batchSize, v); return this; }
  public HvdMlpClassifier setHiddenSize(int v) { set(p.hiddenSize, v); return this; }
  public HvdMlpClassifier setLearningRate(double v) { set(p.learningRate, v); return this; }
  public HvdMlpClassifier setSeed(long v) { set(p.seed, v); return this; }

  public String getFeaturesCol() { return getOrDefault(p.featuresCol); }
  public String getLabelCol() { return getOrDefault(p.labelCol); }
  public String getPredictionCol() { return getOrDefault(p.predictionCol); }
  public String getRawPredictionCol() { return getOrDefault(p.rawPredictionCol); }
  public String getProbabilityCol() { return getOrDefault(p.probabilityCol); }
  public int getNumProc() { return (Integer) getOrDefault(p.numProc); }
  public int getEpochs() { return (Integer) getOrDefault(p.epochs); }
  public int getBatchSize() { return (Integer) getOrDefault(p.batchSize); }
  public int getHiddenSize() { return (Integer) getOrDefault(p.hiddenSize); }
  public double getLearningRate() { return (Double) getOrDefault(p.learningRate); }
  public long getSeed() { return (Long) getOrDefault(p.seed); }

  /** hvd settings for the training job (not a Spark Param: not saved). */
  public HvdMlpClassifier setHvdConfig(HvdConfig config) {
    this.hvdConfig = config == null ? HvdConfig.fromEnvironment() : config;
    return this;
  }

  @Override
  public HvdMlpClassificationModel fit(Dataset<?> dataset) {
    transformSchema(dataset.schema());
    Dataset<Row> rows = dataset.select(functions.col(getFeaturesCol()),
        functions.col(getLabelCol()).cast("double"));
    int n = getNumProc();
    MlpTrainer trainer = new MlpTrainer(getHiddenSize(), getEpochs(), getBatchSize(),
        getLearningRate(), getSeed());
    List<MlpTrainer.Result> results = HvdSpark.run(rows.toJavaRDD().repartition(n), trainer, hvdConfig);
    MlpTrainer.Result r0 = results.get(0);
    HvdMlpClassificationModel model = new HvdMlpClassificationModel(uid, r0.model, r0.epochLoss);
    copyValues(model, ParamMap.empty());
    model.setParent(this);
    return model;
  }

  @Override
  public StructType transformSchema(StructType schema) {
    return HvdMlpClassificationModel.addVectorColumns(
        HvdMlpClassificationModel.checkAndAdd(schema, getFeaturesCol(), getLabelCol(), getPredictionCol(), true),
        getRawPredictionCol(), getProbabilityCol());
  }

  @Override
  public HvdMlpClassifier copy(ParamMap extra) {
    HvdMlpClassifier c = defaultCopy(extra);
    c.hvdConfig = hvdConfig;
    return c;
  }

  // ---- persistence (params only) --------------------------------------------

  @Override
  public MLWriter write() {
    return new MLWriter() {
      @Override
      public void saveImpl(String path) {
        try {
          MlpPersistence.saveMetadata(HvdMlpClassifier.this, path, sparkSession());
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      }
    };
  }

  public static MLReader<HvdMlpClassifier> read() {
    return new MLReader<HvdMlpClassifier>() {
      @Override
      public HvdMlpClassifier load(String path) {
        try {
          JsonNode meta = MlpPersistence.loadMetadata(path, sparkSession(), HvdMlpClassifier.class);
          HvdMlpClassifier est = new HvdMlpClassifier(meta.path("uid").asText());
          MlpPersistence.applyParams(est, meta, (param, value) -> est.set(param, value));
          return est;
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      }
    };
  }

  public static HvdMlpClassifier load(String path) {
    return read().load(path);
  }
}
