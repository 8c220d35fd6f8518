package org.hvd.spark.ml;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.ml.Model;
import org.apache.spark.ml.linalg.SQLDataTypes;
import org.apache.spark.ml.linalg.Vector;
import org.apache.spark.ml.linalg.Vectors;
import org.apache.spark.ml.param.DoubleParam;
import org.apache.spark.ml.param.IntParam;
import org.apache.spark.ml.param.LongParam;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.util.MLReader;
import org.apache.spark.ml.util.MLWritable;
import org.apache.spark.ml.util.MLWriter;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The model {@link HvdMlpClassifier} fits: {@link #transform} adds the
 * prediction column (class index as a double), rawPrediction (the output
 * layer before the softmax) and probability (Vectors). Predicting needs no hvd and no
 * barrier mode. Saved with Spark ML persistence: params in
 * {@code <path>/metadata}, layer sizes and weights in {@code <path>/data}
 * (Parquet).
 */
public final class HvdMlpClassificationModel extends Model<HvdMlpClassificationModel>
    implements MLWritable {
  private static final long serialVersionUID = 1L;
  private final String uid;
  private final MlpParams p;
  private final Mlp mlp;
  private final double[] trainingLoss;

  HvdMlpClassificationModel(String uid, Mlp mlp, double[] trainingLoss) {
    this.uid = uid;
    this.p = new MlpParams(this);
    this.mlp = mlp;
    this.trainingLoss = trainingLoss == null ? new double[0] : trainingLoss;
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

  public HvdMlpClassificationModel setFeaturesCol(String v) { set(p.featuresCol, v); return this; }
  public HvdMlpClassificationModel setPredictionCol(String v) { set(p.predictionCol, v); return this; }
  public HvdMlpClassificationModel setRawPredictionCol(String v) { set(p.rawPredictionCol, v); return this; }
  public HvdMlpClassificationModel setProbabilityCol(String v) { set(p.probabilityCol, v); return this; }
  public String getFeaturesCol() { return getOrDefault(p.featuresCol); }
  public String getPredictionCol() { return getOrDefault(p.predictionCol); }
  public String getRawPredictionCol() { return getOrDefault(p.rawPredictionCol); }
  public String getProbabilityCol() { return getOrDefault(p.probabilityCol); }

  /** Number of input features. */
  public int numFeatures() {
    return mlp.d;
  }

  /** Number of classes. */
  public int numClasses() {
    return mlp.k;
  }

  /** Mean training loss (cross-entropy) of each epoch, over all ranks. */
  public double[] trainingLoss() {
    return trainingLoss.clone();
  }

  /** The class index for one feature vector. */
  public double predict(Vector features) {
    return mlp.predict(features.toArray());
  }

  /** The output layer's values before the softmax, one per class (Spark's rawPrediction). */
  public Vector predictRaw(Vector features) {
    return Vectors.dense(mlp.logits(features.toArray(), new double[mlp.hidden]));
  }

  /** Class probabilities (the softmax of {@link #predictRaw}). */
  public Vector predictProbability(Vector features) {
    return Vectors.dense(Mlp.softmax(mlp.logits(features.toArray(), new double[mlp.hidden])));
  }

  /**
   * Adds the prediction column (class index as a double) and, unless their
   * names are set to "", rawPrediction (the output layer before the softmax)
   * and probability (the softmax), both Vectors of numClasses values, as
   * Spark's probabilistic classifiers do (so BinaryClassificationEvaluator
   * and MulticlassClassificationEvaluator take the output as it is).
   */
  @Override
  public Dataset<Row> transform(Dataset<?> dataset) {
    transformSchema(dataset.schema());
    Mlp m = mlp;
    int d = m.d;
    String rawCol = getRawPredictionCol(), probCol = getProbabilityCol();
    // One UDF computes the logits; the other columns derive from them.
    String logitsCol = rawCol.isEmpty() ? "_hvd_rawPrediction_" + uid : rawCol;
    UserDefinedFunction raw = functions.udf((UDF1<Vector, Vector>) v -> {
      if (v.size() != d) {
        throw new IllegalArgumentException("expected " + d + " features, got " + v.size());
      }
      return Vectors.dense(m.logits(v.toArray(), new double[m.hidden]));
    }, SQLDataTypes.VectorType());
    UserDefinedFunction prob = functions.udf(
        (UDF1<Vector, Vector>) z -> Vectors.dense(Mlp.softmax(z.toArray())), SQLDataTypes.VectorType());
    UserDefinedFunction argmax = functions.udf(
        (UDF1<Vector, Double>) z -> (double) Mlp.argmax(z.toArray()), DataTypes.DoubleType);
    Dataset<Row> out = dataset.withColumn(logitsCol, raw.apply(functions.col(getFeaturesCol())));
    if (!probCol.isEmpty()) out = out.withColumn(probCol, prob.apply(functions.col(logitsCol)));
    out = out.withColumn(getPredictionCol(), argmax.apply(functions.col(logitsCol)));
    return rawCol.isEmpty() ? out.drop(logitsCol) : out;
  }

  @Override
  public StructType transformSchema(StructType schema) {
    return addVectorColumns(checkAndAdd(schema, getFeaturesCol(), null, getPredictionCol(), false),
        getRawPredictionCol(), getProbabilityCol());
  }

  /** Adds the named Vector columns (skipping empty names; an existing one is an error). */
  static StructType addVectorColumns(StructType schema, String... names) {
    StructType out = schema;
    for (String c : names) {
      if (c.isEmpty()) continue;
      if (List.of(out.fieldNames()).contains(c)) throw new IllegalArgumentException("column " + c + " already exists");
      out = out.add(new StructField(c, SQLDataTypes.VectorType(), false, Metadata.empty()));
    }
    return out;
  }

  static StructType checkAndAdd(StructType schema, String features, String label, String prediction,
                                boolean needLabel) {
    StructField f = field(schema, features);
    if (!f.dataType().equals(SQLDataTypes.VectorType())) {
      throw new IllegalArgumentException("column " + features + " must be a Vector, is " + f.dataType());
    }
    if (needLabel) {
      DataType t = field(schema, label).dataType();
      if (!(t instanceof org.apache.spark.sql.types.NumericType)) {
        throw new IllegalArgumentException("column " + label + " must be numeric, is " + t);
      }
    }
    if (List.of(schema.fieldNames()).contains(prediction)) {
      throw new IllegalArgumentException("column " + prediction + " already exists");
    }
    return schema.add(new StructField(prediction, DataTypes.DoubleType, false, Metadata.empty()));
  }

  private static StructField field(StructType schema, String name) {
    if (!List.of(schema.fieldNames()).contains(name)) {
      throw new IllegalArgumentException("no column " + name + " in " + schema.simpleString());
    }
    return schema.apply(name);
  }

  @Override
  public HvdMlpClassificationModel copy(ParamMap extra) {
    HvdMlpClassificationModel c = new HvdMlpClassificationModel(uid, mlp, trainingLoss);
    copyValues(c, extra);
    return c.setParent(parent());
  }

  // ---- persistence ------------------------------------------------------------

  private static final StructType DATA_SCHEMA = new StructType()
      .add("numFeatures", DataTypes.IntegerType)
      .add("hiddenSize", DataTypes.IntegerType)
      .add("numClasses", DataTypes.IntegerType)
      .add("layer", DataTypes.IntegerType)
      .add("values", DataTypes.createArrayType(DataTypes.DoubleType, false))
      .add("trainingLoss", DataTypes.createArrayType(DataTypes.DoubleType, false));

  @Override
  public MLWriter write() {
    return new MLWriter() {
      @Override
      public void saveImpl(String path) {
        try {
          MlpPersistence.saveMetadata(HvdMlpClassificationModel.this, path, sparkSession());
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
        List<Row> rows = new ArrayList<>();
        for (int i = 0; i < mlp.params.length; ++i) {
          rows.add(RowFactory.create(mlp.d, mlp.hidden, mlp.k, i, box(mlp.params[i]), box(trainingLoss)));
        }
        sparkSession().createDataFrame(rows, DATA_SCHEMA).coalesce(1).write().parquet(path + "/data");
      }
    };
  }

  public static MLReader<HvdMlpClassificationModel> read() {
    return new MLReader<HvdMlpClassificationModel>() {
      @Override
      public HvdMlpClassificationModel load(String path) {
        try {
          JsonNode meta = MlpPersistence.loadMetadata(path, sparkSession(), HvdMlpClassificationModel.class);
          List<Row> rows = sparkSession().read().parquet(path + "/data")
              .orderBy("layer").collectAsList();
          if (rows.isEmpty()) throw new IOException(path + "/data holds no weights");
          Row first = rows.get(0);
          int d = first.getInt(0), hidden = first.getInt(1), k = first.getInt(2);
          double[][] params = new double[rows.size()][];
          for (Row r : rows) params[r.getInt(3)] = unbox(r.getList(4));
          Mlp m = new Mlp(d, hidden, k, params);
          double[] loss = unbox(first.getList(5));
          HvdMlpClassificationModel model =
              new HvdMlpClassificationModel(meta.path("uid").asText(), m, loss);
          MlpPersistence.applyParams(model, meta, (param, value) -> model.set(param, value));
          return model;
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      }
    };
  }

  public static HvdMlpClassificationModel load(String path) {
    return read().load(path);
  }

  private static Double[] box(double[] a) {
    Double[] b = new Double[a.length];
    for (int i = 0; i < a.length; ++i) b[i] = a[i];
    return b;
  }

  private static double[] unbox(List<Object> l) {
    double[] a = new double[l.size()];
    for (int i = 0; i < a.length; ++i) a[i] = ((Number) l.get(i)).doubleValue();
    return a;
  }
}
