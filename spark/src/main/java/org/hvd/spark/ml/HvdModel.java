package org.hvd.spark.ml;

import java.io.Serializable;
import java.util.List;
import org.apache.spark.ml.Model;
import org.apache.spark.ml.linalg.SQLDataTypes;
import org.apache.spark.ml.linalg.Vector;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** What {@link HvdEstimator} fits: rank 0's trained state and the user's predictor. */
public final class HvdModel<S extends Serializable> extends Model<HvdModel<S>> {
  private static final long serialVersionUID = 1L;

  /** Scores one features Vector with the trained state. */
  @FunctionalInterface
  public interface Predictor<S> extends Serializable {
    double predict(S state, Vector features) throws Exception;
  }

  private final String uid;
  private final S state;
  private final Predictor<S> predictor;
  private final Param<String> featuresCol, predictionCol;

  HvdModel(String uid, S state, Predictor<S> predictor) {
    this.uid = uid;
    this.state = state;
    this.predictor = predictor;
    featuresCol = new Param<>(this, "featuresCol", "features column name (a Vector)");
    predictionCol = new Param<>(this, "predictionCol", "prediction column name");
    setDefault(featuresCol, "features");
    setDefault(predictionCol, "prediction");
  }

  @Override
  public String uid() {
    return uid;
  }

  public Param<String> featuresCol() { return featuresCol; }
  public Param<String> predictionCol() { return predictionCol; }
  public HvdModel<S> setFeaturesCol(String v) { set(featuresCol, v); return this; }
  public HvdModel<S> setPredictionCol(String v) { set(predictionCol, v); return this; }
  public String getFeaturesCol() { return getOrDefault(featuresCol); }
  public String getPredictionCol() { return getOrDefault(predictionCol); }

  /** Rank 0's result of the training function. */
  public S state() {
    return state;
  }

  /** The predictor applied to one Vector. */
  public double predict(Vector features) throws Exception {
    return predictor.predict(state, features);
  }

  @Override
  public Dataset<Row> transform(Dataset<?> dataset) {
    transformSchema(dataset.schema());
    S s = state;
    Predictor<S> p = predictor;
    UserDefinedFunction udf = functions.udf((UDF1<Vector, Double>) v -> p.predict(s, v), DataTypes.DoubleType);
    return dataset.withColumn(getPredictionCol(), udf.apply(functions.col(getFeaturesCol())));
  }

  @Override
  public StructType transformSchema(StructType schema) {
    return outputSchema(schema, getFeaturesCol(), getPredictionCol());
  }

  static StructType outputSchema(StructType schema, String features, String prediction) {
    List<String> names = List.of(schema.fieldNames());
    if (!names.contains(features)) {
      throw new IllegalArgumentException("no column " + features + " in " + schema.simpleString());
    }
    if (!schema.apply(features).dataType().equals(SQLDataTypes.VectorType())) {
      throw new IllegalArgumentException("column " + features + " must be a Vector, is "
          + schema.apply(features).dataType());
    }
    if (names.contains(prediction)) throw new IllegalArgumentException("column " + prediction + " already exists");
    return schema.add(new StructField(prediction, DataTypes.DoubleType, false, Metadata.empty()));
  }

  @Override
  public HvdModel<S> copy(ParamMap extra) {
    HvdModel<S> c = new HvdModel<>(uid, state, predictor);
    copyValues(c, extra);
    return c.setParent(parent());
  }
}
