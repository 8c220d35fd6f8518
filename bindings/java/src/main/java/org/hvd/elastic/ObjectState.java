package org.hvd.elastic;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.ObjectStreamClass;
import java.io.Serializable;

/**
 * A {@link State} holding one Serializable value (a record of counters, a
 * model's parameters, a map of them). {@link #save()} keeps a serialized copy
 * of it, so changes made in place afterwards do not reach the copy;
 * {@link #restore()} sets a fresh copy again; {@link #sync()} broadcasts rank
 * 0's saved copy and sets it on every rank (new workers included).
 *
 * <pre>{@code
 * ObjectState<Progress> state = new ObjectState<>(new Progress());   // epoch, batch, weights
 * Elastic.run(state, s -> {
 *   for (Progress p = s.get(); p.batch < batches; ++p.batch) {
 *     step(p);
 *     if (p.batch % 10 == 0) s.commit();
 *   }
 *   return s.get();
 * });
 * }</pre>
 *
 * <p>The value saved at construction is the first copy to go back to.
 */
public class ObjectState<T extends Serializable> extends State {
  static final String SYNC_NAME = "elastic.object_state";

  private T value;
  private byte[] saved;

  /** Over the calling thread's context ({@link ElasticContext#current()}). */
  public ObjectState(T initial) {
    this(ElasticContext.current(), initial);
  }

  public ObjectState(ElasticContext context, T initial) {
    super(context);
    this.value = initial;
    this.saved = serialize(initial);
  }

  /** The current value (changes made to it in place are the state's). */
  public T get() {
    return value;
  }

  /** Replaces the current value (not the saved copy: {@link #commit()} saves). */
  public void set(T v) {
    value = v;
  }

  @Override
  public void save() {
    saved = serialize(value);
  }

  @Override
  public void restore() {
    value = deserialize(saved);
  }

  @Override
  public void sync() {
    saved = context().broadcast(saved, 0, SYNC_NAME);
    value = deserialize(saved);
  }

  static byte[] serialize(Object v) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(v);
    } catch (IOException e) {
      throw new IllegalStateException("ObjectState: the value cannot be serialized: " + e, e);
    }
    return bytes.toByteArray();
  }

  @SuppressWarnings("unchecked")
  T deserialize(byte[] b) {
    try (ObjectInputStream in = new LoaderObjectInputStream(new ByteArrayInputStream(b))) {
      return (T) in.readObject();
    } catch (IOException | ClassNotFoundException e) {
      throw new IllegalStateException("ObjectState: the saved value cannot be read back: " + e, e);
    }
  }

  /** Resolves classes with the thread's context class loader first (Spark executors). */
  private static final class LoaderObjectInputStream extends ObjectInputStream {
    LoaderObjectInputStream(InputStream in) throws IOException {
      super(in);
    }

    @Override
    protected Class<?> resolveClass(ObjectStreamClass desc) throws IOException, ClassNotFoundException {
      ClassLoader l = Thread.currentThread().getContextClassLoader();
      if (l != null) {
        try {
          return Class.forName(desc.getName(), false, l);
        } catch (ClassNotFoundException e) {
          // fall through to the default
        }
      }
      return super.resolveClass(desc);
    }
  }
}
