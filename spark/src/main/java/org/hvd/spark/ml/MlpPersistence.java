package org.hvd.spark.ml;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.Params;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;

/**
 * Params metadata in the layout Spark's own ML writers use: one JSON line in
 * {@code <path>/metadata} with class, timestamp, sparkVersion, uid, paramMap
 * (values set explicitly) and defaultParamMap, each value encoded by its
 * Param's own jsonEncode.
 */
final class MlpPersistence {
  private static final ObjectMapper JSON = new ObjectMapper();

  private MlpPersistence() {}

  @SuppressWarnings("unchecked")
  static void saveMetadata(Params instance, String path, SparkSession spark) throws IOException {
    ObjectNode meta = JSON.createObjectNode();
    meta.put("class", instance.getClass().getName());
    meta.put("timestamp", System.currentTimeMillis());
    meta.put("sparkVersion", spark.version());
    meta.put("uid", instance.uid());
    ObjectNode set = meta.putObject("paramMap");
    ObjectNode defaults = meta.putObject("defaultParamMap");
    for (Param<?> p : instance.params()) {
      Param<Object> po = (Param<Object>) p;
      if (instance.isSet(po)) set.set(p.name(), JSON.readTree(po.jsonEncode(instance.get(po).get())));
      if (instance.hasDefault(po)) {
        defaults.set(p.name(), JSON.readTree(po.jsonEncode(instance.getDefault(po).get())));
      }
    }
    spark.createDataset(List.of(JSON.writeValueAsString(meta)), Encoders.STRING())
        .coalesce(1).write().text(path + "/metadata");
  }

  static JsonNode loadMetadata(String path, SparkSession spark, Class<?> expected) throws IOException {
    String line = spark.read().text(path + "/metadata").first().getString(0);
    JsonNode meta = JSON.readTree(line);
    String cls = meta.path("class").asText();
    if (!cls.equals(expected.getName())) {
      throw new IOException(path + " holds a " + cls + ", not a " + expected.getName());
    }
    return meta;
  }

  /** Decodes the explicitly set params and passes each to set. */
  @SuppressWarnings("unchecked")
  static void applyParams(Params instance, JsonNode meta, ParamSetter set) throws IOException {
    Iterator<Map.Entry<String, JsonNode>> it = meta.path("paramMap").fields();
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> e = it.next();
      if (!instance.hasParam(e.getKey())) continue;  // written by a newer version
      Param<Object> p = (Param<Object>) instance.getParam(e.getKey());
      set.set(p, p.jsonDecode(JSON.writeValueAsString(e.getValue())));
    }
  }

  interface ParamSetter {
    void set(Param<Object> p, Object value);
  }
}
