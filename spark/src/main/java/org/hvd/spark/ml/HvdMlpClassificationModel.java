package org.hvd.spark.ml;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.ml.Model;
import org.apache.spark.ml.linalg.SQLDataTypes;
import org.apache.spark.ml.linalg.Vector;
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
 * prediction column (class index as a double). Predicting needs no hvd and no
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
  public IntParam numProc() { return p.numProc; }
  public IntParam epochs() { return p.epochs; }
  public IntParam batchSize() { return p.batchSize; }
  public IntParam hiddenSize() { return p.hiddenSize; }
  public DoubleParam learningRate() { return p.learningRate; }
  public LongParam seed() { return p.seed; }

  public HvdMlpClassificationModel setFeaturesCol(String v) { set(p.featuresCol, v); return this; }
  public HvdMlpClassificationModel setPredictionCol(String v) { set(p.predictionCol, v); return this; }
  public String getFeaturesCol() { return getOrDefault(p.featuresCol); }
  public String getPredictionCol() { return getOrDefault(p.predictionCol); }

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

  @Override
  public Dataset<Row> transform(Dataset<?> dataset) {
    transformSchema(dataset.schema());
    Mlp m = mlp;
    int d = m.d;
    UserDefinedFunction predict = functions.udf((UDF1<Vector, Double>) v -> {
      if (v.size() != d) {
        throw new IllegalArgumentException("expected " + d + " features, got " + v.size());
      }
      return (double) m.predict(v.toArray());
    }, DataTypes.DoubleType);
    return dataset.withColumn(getPredictionCol(), predict.apply(functions.col(getFeaturesCol())));
  }

  @Override
  public StructType transformSchema(StructType schema) {
    return checkAndAdd(schema, getFeaturesCol(), null, getPredictionCol(), false);
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
