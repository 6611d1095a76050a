def task(result, env, ctx)
    return 1
